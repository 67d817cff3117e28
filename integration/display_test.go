package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"tempest/internal/target"
)

// tmuxSession is a tmux server of the test's own (its own socket), so the
// test never touches a person's sessions and its cleanup kills only it.
type tmuxSession struct {
	t      *testing.T
	socket string
	name   string
}

// startTmux runs script in a detached tmux window of width × height cells:
// a real terminal, which is what the CLI's live display draws on.
func startTmux(t *testing.T, script string, width, height int) *tmuxSession {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("tmux is not installed, and CI must show the live display on a terminal")
		}
		t.Skip("tmux is not installed: cannot give the CLI a terminal")
	}
	s := &tmuxSession{t: t, socket: fmt.Sprintf("tempest-test-%d", os.Getpid()), name: "display"}
	path := filepath.Join(t.TempDir(), "run.sh")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+script), 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := s.tmux("new-session", "-d", "-s", s.name, "-x", fmt.Sprint(width), "-y", fmt.Sprint(height), path); err != nil {
		t.Fatalf("tmux new-session: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = s.tmux("kill-server") })
	return s
}

func (s *tmuxSession) tmux(args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, "tmux", append([]string{"-L", s.socket}, args...)...).CombinedOutput()
}

// screen is what the window shows now.
func (s *tmuxSession) screen() string {
	out, err := s.tmux("capture-pane", "-p", "-t", s.name)
	if err != nil {
		s.t.Fatalf("tmux capture-pane: %v\n%s", err, out)
	}
	return string(out)
}

// A two-datacenter job submitted with --wait on a terminal, through the
// gates: while it runs the screen shows a progress bar and a line per
// datacenter from the gate's merged status; when it ends, the summary.
func TestLiveDisplayOverTwoDatacentersInTmux(t *testing.T) {
	c := startGated(t, 1, 2, 1, 1)
	tgt := startTarget(t, target.DefaultConfig())
	job := filepath.Join(t.TempDir(), "two-dcs.yaml")
	if err := os.WriteFile(job, []byte(gatedJob("display", "http://"+tgt.Addr(), 2, "12s", 2)), 0o600); err != nil {
		t.Fatal(err)
	}
	var env strings.Builder
	for _, kv := range append(c.Env(), "TEMPEST_API="+strings.Join(c.APIs(), ","), "TERM=xterm-256color") {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&env, "export %s='%s'\n", k, strings.ReplaceAll(v, "'", `'\''`))
	}
	// The window stays open after the CLI ends, so its summary can be read.
	s := startTmux(t, env.String()+fmt.Sprintf("'%s' submit '%s' --wait\necho \"EXIT=$?\"\nsleep 600\n",
		filepath.Join(binDir, "tempest"), job), 120, 40)

	bar := regexp.MustCompile(`\[=*>? *\] +\d+%`)
	dcLine := func(screen, dc string) bool {
		return regexp.MustCompile(`(?m)^\s+dc ` + dc + `\s+(RUNNING|QUEUED|COMPLETED)\s`).MatchString(screen)
	}
	var live string
	deadline := time.Now().Add(90 * time.Second)
	for {
		screen := s.screen()
		if bar.MatchString(screen) && dcLine(screen, "dc1") && dcLine(screen, "dc2") {
			live = screen
			break
		}
		if strings.Contains(screen, "EXIT=") || time.Now().After(deadline) {
			t.Fatalf("never saw a progress bar with a line per datacenter while the job ran; screen:\n%s", screen)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("live display:\n%s", live)

	var final string
	for deadline := time.Now().Add(90 * time.Second); ; {
		final = s.screen()
		if strings.Contains(final, "EXIT=") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("submit --wait did not end; screen:\n%s", final)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(final, "EXIT=0") || !strings.Contains(final, "(display): COMPLETED") {
		t.Fatalf("want the job COMPLETED and exit 0; screen:\n%s", final)
	}
}
