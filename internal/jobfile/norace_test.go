//go:build !race

package jobfile

const raceEnabled = false
