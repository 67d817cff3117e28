// Package obstest checks a node's metrics exposition in tests: with
// promtool, Prometheus's own linter, when it is installed.
package obstest

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tempest/internal/obs"
	"tempest/internal/testutil"
)

// Promtool runs `promtool check metrics` on text (exposition format 0.0.4)
// and fails t with its findings. Without promtool on PATH it skips t,
// saying how to get it: the check is Prometheus's, not one we could
// reimplement and call equivalent.
func Promtool(t testing.TB, text []byte) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not on PATH (Debian package prometheus: apt-get install prometheus); the exposition lint is skipped")
	}
	if len(bytes.TrimSpace(text)) == 0 {
		t.Fatal("no metrics to check")
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = bytes.NewReader(text)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, strings.TrimSpace(out.String()))
	}
}

// Text is what /metrics serves from g to a scraper that asks for no
// particular format: text exposition 0.0.4.
func Text(t testing.TB, g prometheus.Gatherer) []byte {
	t.Helper()
	rec := httptest.NewRecorder()
	obs.Handler(g, "", true).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("metrics: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.Bytes()
}

// Registered registers a node's series with register in a registry of its
// own (obs.NewRegistry, so the runtime's series are there too), waits
// until the text /metrics would serve holds every want (a role may first
// have to be elected), checks that registering a second time is refused (a
// registry checks names once, at registration), passes the text through
// promtool and returns it. what names the node in failures.
func Registered(t testing.TB, what string, within time.Duration, register func(prometheus.Registerer) error, wants ...string) string {
	t.Helper()
	reg := obs.NewRegistry()
	if err := register(reg); err != nil {
		t.Fatal(err)
	}
	var text string
	testutil.Eventually(t, within, 10*time.Millisecond, func() error {
		text = string(Text(t, reg))
		for _, want := range wants {
			if !strings.Contains(text, want) {
				return fmt.Errorf("%s metrics lack %q:\n%s", what, want, text)
			}
		}
		return nil
	})
	if err := register(reg); err == nil {
		t.Errorf("registering the %s's metrics twice succeeded", what)
	}
	Promtool(t, []byte(text))
	return text
}
