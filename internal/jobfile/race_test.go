//go:build race

package jobfile

// raceEnabled shrinks the hostile-input tests, which the race detector slows
// tenfold; the full-size run happens without it.
const raceEnabled = true
