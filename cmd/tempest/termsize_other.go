//go:build !linux

package main

import "os"

// terminalWidth is 0 (unknown) where the CLI does not ask the terminal:
// lines are then left as they are.
func terminalWidth(*os.File) int { return 0 }
