package main

import (
	"runtime/debug"
	"testing"
)

func TestVersionLine(t *testing.T) {
	info := func(settings ...debug.BuildSetting) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			return &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: settings}, true
		}
	}
	tests := []struct {
		name string
		read func() (*debug.BuildInfo, bool)
		want string
	}{
		{"no build info", func() (*debug.BuildInfo, bool) { return nil, false }, "tempest (no build information)"},
		{"no vcs stamp", info(), "tempest (commit unknown) go1.26.8"},
		{"clean commit", info(debug.BuildSetting{Key: "vcs.revision", Value: "7406573abcdef0123456789"},
			debug.BuildSetting{Key: "vcs.time", Value: "2026-11-28T14:00:00Z"},
			debug.BuildSetting{Key: "vcs.modified", Value: "false"}),
			"tempest commit 7406573abcde 2026-11-28T14:00:00Z go1.26.8"},
		{"dirty tree", info(debug.BuildSetting{Key: "vcs.revision", Value: "7406573abcdef0123456789"},
			debug.BuildSetting{Key: "vcs.modified", Value: "true"}),
			"tempest commit 7406573abcde+dirty go1.26.8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := versionLine(tt.read); got != tt.want {
				t.Fatalf("versionLine = %q, want %q", got, tt.want)
			}
		})
	}
}
