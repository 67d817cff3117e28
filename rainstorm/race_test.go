//go:build race

package rainstorm

// raceEnabled shrinks the simulation, which the race detector slows
// tenfold; the full set of seeds runs without it.
const raceEnabled = true
