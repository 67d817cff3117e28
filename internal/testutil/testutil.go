// Package testutil holds the helpers every package's tests share: polling
// for a condition with a deadline (never sleep-and-hope), free ports,
// temporary data directories and goroutine-leak checks.
package testutil

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Eventually polls cond every `every` until it returns nil or `total` has
// passed, then fails the test with the last error cond returned.
func Eventually(t testing.TB, total, every time.Duration, cond func() error) {
	t.Helper()
	if err := Poll(total, every, cond); err != nil {
		t.Fatalf("condition not met within %s: %v", total, err)
	}
}

// Poll is Eventually without a testing.TB, for benchmarks and integration
// harnesses: it returns the last error if the deadline passes.
func Poll(total, every time.Duration, cond func() error) error {
	deadline := time.Now().Add(total)
	var err error
	for {
		if err = cond(); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(every)
	}
}

// FreeTCPPort returns a loopback TCP port that was free a moment ago.
func FreeTCPPort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free tcp port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// FreeUDPPort returns a loopback UDP port that was free a moment ago.
func FreeUDPPort(t testing.TB) int {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free udp port: %v", err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

// FreePort returns a loopback port free for both TCP and UDP, which
// memberlist needs (it binds both on one port).
func FreePort(t testing.TB) int {
	t.Helper()
	for i := 0; i < 50; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		c, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		l.Close()
		if err == nil {
			c.Close()
			return port
		}
	}
	t.Fatalf("free port: no port free for both tcp and udp after 50 tries")
	return 0
}

// DataDir makes a fresh directory for one node's data under the test's
// temporary directory; it is removed when the test ends.
func DataDir(t testing.TB, name string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatalf("data dir %s: %v", dir, err)
	}
	return dir
}

// VerifyNoLeaks is meant for TestMain: it runs the package's tests and then
// fails if goroutines are left behind.
func VerifyNoLeaks(m *testing.M) {
	goleak.VerifyTestMain(m, LeakOptions()...)
}

// CheckLeaks fails t at cleanup if goroutines started during the test remain.
func CheckLeaks(t *testing.T) {
	t.Helper()
	opts := append(LeakOptions(), goleak.IgnoreCurrent())
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}

// LeakOptions ignores long-lived goroutines owned by libraries rather than
// by the code under test.
func LeakOptions() []goleak.Option {
	// Empty on purpose: add an entry only for a named library goroutine that
	// is known to outlive its owner, with the reason beside it.
	return nil
}
