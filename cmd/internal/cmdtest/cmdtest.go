// Package cmdtest runs a node binary's run in-process for the commands'
// tests (tempest-gate, tempest-manager, tempest-worker): start it with its
// arguments and environment, wait until it serves or logs a line, signal
// it, wait for its exit code; and the checks every binary's tests repeat.
// Only tests import it.
package cmdtest

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"tempest/api"
	"tempest/cmd/internal/nodecmd"
	"tempest/internal/testutil"
)

// Run is a node binary's run: its arguments and the process it would get.
// ready, if not nil, receives the API URL once the node serves.
type Run func(args []string, getenv func(string) string, stderr io.Writer, sigs <-chan os.Signal, ready chan<- string) int

// NoReady adapts the run of a binary with no API (the worker's).
func NoReady(run func(args []string, getenv func(string) string, stderr io.Writer, sigs <-chan os.Signal) int) Run {
	return func(args []string, getenv func(string) string, stderr io.Writer, sigs <-chan os.Signal, _ chan<- string) int {
		return run(args, getenv, stderr, sigs)
	}
}

// Env is an environment of exactly vals (nil: empty).
func Env(vals map[string]string) func(string) string {
	return func(k string) string { return vals[k] }
}

// Proc is a run going on in a goroutine of the test.
type Proc struct {
	t      testing.TB
	Stderr testutil.SyncBuffer
	sigs   chan os.Signal
	ready  chan string
	exit   chan int
}

// Start runs run(args) with env as its whole environment. The test must
// end it (Stop, or Signal and Exit); while it runs, a failed test logs its
// stderr.
func Start(t testing.TB, run Run, args []string, env map[string]string) *Proc {
	t.Helper()
	p := &Proc{t: t, sigs: make(chan os.Signal, 1), ready: make(chan string, 1), exit: make(chan int, 1)}
	go func() { p.exit <- run(args, Env(env), &p.Stderr, p.sigs, p.ready) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s log:\n%s", args, p.Stderr.String())
		}
	})
	return p
}

// Serving waits for the API URL; the test fails if the run exits first or
// is not serving within the deadline.
func (p *Proc) Serving(within time.Duration) string {
	p.t.Helper()
	select {
	case url := <-p.ready:
		return url
	case code := <-p.exit:
		p.t.Fatalf("exited %d before serving", code)
	case <-time.After(within):
		p.t.Fatalf("not serving after %s", within)
	}
	return ""
}

// WaitLog waits for substr in the run's stderr.
func (p *Proc) WaitLog(substr string) {
	p.t.Helper()
	testutil.Eventually(p.t, 15*time.Second, 10*time.Millisecond, func() error {
		if !strings.Contains(p.Stderr.String(), substr) {
			return fmt.Errorf("no %q in the log yet", substr)
		}
		return nil
	})
}

// Signal sends sig to the run.
func (p *Proc) Signal(sig os.Signal) { p.sigs <- sig }

// Exit waits for the run's exit code; the test fails if it has not exited
// within the deadline.
func (p *Proc) Exit(within time.Duration) int {
	p.t.Helper()
	select {
	case code := <-p.exit:
		return code
	case <-time.After(within):
		p.t.Fatalf("no exit %s after the signal", within)
	}
	return -1
}

// Stop sends SIGTERM and fails the test unless the run exits with
// nodecmd.ExitOK.
func (p *Proc) Stop() {
	p.t.Helper()
	p.Signal(syscall.SIGTERM)
	if code := p.Exit(30 * time.Second); code != nodecmd.ExitOK {
		p.t.Fatalf("exit %d after SIGTERM", code)
	}
}

// ReloadsSecrets sends SIGHUP and waits for the run to log the reload.
func (p *Proc) ReloadsSecrets(logged string) {
	p.t.Helper()
	p.Signal(syscall.SIGHUP)
	p.WaitLog(logged)
}

// Client is an API client of url with token, closed when the test ends,
// and a context for its calls that ends with the test.
func Client(t testing.TB, url, token string) (*api.Client, context.Context) {
	t.Helper()
	client, err := api.NewClient([]string{url}, token)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(func() {
		cancel()
		client.Close()
	})
	return client, ctx
}

// WaitCluster waits until ok accepts the cluster view client serves.
func WaitCluster(t testing.TB, ctx context.Context, client *api.Client, ok func(*api.ClusterView) error) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		view, err := client.Cluster(ctx)
		if err != nil {
			return err
		}
		return ok(view)
	})
}

// ServerArgs are the flags that run a gate or manager id alone on
// loopback, in a group of one, with a fresh data dir and the test timing
// profiles, followed by extra; quic and swim are its addresses.
func ServerArgs(t testing.TB, id string, extra ...string) (args []string, quic, swim string) {
	quic = fmt.Sprintf("127.0.0.1:%d", testutil.FreeUDPPort(t))
	swim = fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	args = []string{
		"--id", id, "--quic", quic, "--swim", swim, "--api", "127.0.0.1:0",
		"--data-dir", testutil.DataDir(t, id), "--peers", id + "=" + quic,
		"--swim-profile", "test", "--election-profile", "test",
	}
	return append(args, extra...), quic, swim
}

// Refusal is a start a binary must refuse: with env as its environment,
// it exits with nodecmd.ExitFailure and says want on stderr.
type Refusal struct {
	Name string
	Env  map[string]string
	Want string
}

// SecretRefusals are the refusals of a node with an API: no secret, a weak
// or short one, no API token. good is a strong secret.
func SecretRefusals(good string) []Refusal {
	return []Refusal{
		{"no secret", map[string]string{"TEMPEST_TOKEN": "t"}, "AUTH_SECRET is not set"},
		{"weak secret", map[string]string{"AUTH_SECRET": strings.Repeat("a", 40), "TEMPEST_TOKEN": "t"}, "AUTH_SECRET"},
		{"short secret", map[string]string{"AUTH_SECRET": "short", "TEMPEST_TOKEN": "t"}, "AUTH_SECRET"},
		{"no token", map[string]string{"AUTH_SECRET": good}, "TEMPEST_TOKEN is not set"},
	}
}

// RefusesToStart runs each refusal as a subtest of run(args).
func RefusesToStart(t *testing.T, run Run, args []string, cases []Refusal) {
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			var stderr testutil.SyncBuffer
			code := run(args, Env(tc.Env), &stderr, nil, nil)
			if code != nodecmd.ExitFailure || !strings.Contains(stderr.String(), tc.Want) {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit %d mentioning %q", code, stderr.String(), nodecmd.ExitFailure, tc.Want)
			}
		})
	}
}

// LoadRefusal is a command line a binary's config loader must refuse with
// an error mentioning Want.
type LoadRefusal struct {
	Name string
	Args []string
	Want string
}

// FlagRefusals are the refusals of the flags gates and managers share;
// role ("gate", "manager") is the word the peers check uses.
func FlagRefusals(role string) []LoadRefusal {
	return []LoadRefusal{
		{"bad peers", []string{"--peers", "a=1.2.3.4:5,b"}, `"b" is not id=quicaddr`},
		{"self not in peers", []string{"--id", "me", "--peers", "a=127.0.0.1:1"}, "must include this " + role},
		{"stray argument", []string{"extra"}, "unexpected arguments"},
	}
}

// RefusesToLoad runs each refusal as a subtest of load.
func RefusesToLoad[C, O any](t *testing.T, load func([]string, io.Writer) (C, O, error), cases []LoadRefusal) {
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			var stderr testutil.SyncBuffer
			_, _, err := load(tc.Args, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.Want) {
				t.Fatalf("loadConfig(%q) = %v, want error with %q", tc.Args, err, tc.Want)
			}
		})
	}
}

// Samples loads each datacenter's sample config of role ("manager",
// "worker") in configs/ with the binary's own loader, as a subtest named
// by the file, checks that it loads and validates, and hands it to check
// with the id and datacenter the sample names.
func Samples[C interface{ Validate() error }, O any](t *testing.T, role string, load func([]string, io.Writer) (C, O, error),
	check func(t *testing.T, cfg C, opts O, id, dc string)) {
	for _, dc := range []string{"east", "west"} {
		file := "../../configs/dc-" + dc + "/" + role + ".yaml"
		t.Run(file, func(t *testing.T) {
			var stderr testutil.SyncBuffer
			cfg, opts, err := load([]string{"--config", file}, &stderr)
			if err != nil {
				t.Fatalf("%v\n%s", err, stderr.String())
			}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			check(t, cfg, opts, dc+"-"+role+"-1", dc)
		})
	}
}
