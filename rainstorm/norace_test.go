//go:build !race

package rainstorm

const raceEnabled = false
