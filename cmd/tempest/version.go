package main

import (
	"fmt"
	"io"
	"runtime/debug"
)

// runVersion prints what the binary was built from: the commit (with
// "+dirty" when the tree had changes), its time and the Go toolchain, as
// `go build` stamps them. A bug report then names the code it ran.
func runVersion(stdout io.Writer) int {
	fmt.Fprintln(stdout, versionLine(debug.ReadBuildInfo))
	return exitOK
}

func versionLine(read func() (*debug.BuildInfo, bool)) string {
	bi, ok := read()
	if !ok {
		return "tempest (no build information)"
	}
	var rev, at string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	line := "tempest"
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		line += " " + v
	}
	switch {
	case rev == "":
		line += " (commit unknown)"
	default:
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if dirty {
			rev += "+dirty"
		}
		line += " commit " + rev
		if at != "" {
			line += " " + at
		}
	}
	return line + " " + bi.GoVersion
}
