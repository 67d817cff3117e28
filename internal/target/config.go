package target

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"time"
)

// Limits that keep one request bounded in time and memory. The server's
// read and write timeouts are derived from MaxDelay, so no configured or
// requested wait can be cut short by them.
const (
	// MaxDelay bounds Latency+Jitter and the wait /delay/{ms} may ask for.
	MaxDelay = time.Minute
	// MaxBodySize bounds the response body; the body is built once and
	// shared by every response.
	MaxBodySize = 16 << 20
	// DefaultBodySize is the length of the default body, "ok".
	DefaultBodySize = 2
)

// Config says how the target answers. The zero value is usable with Serve
// (an empty 200 to everything, at once); DefaultConfig is what the CLI
// starts from.
type Config struct {
	// Addr is the TCP address Start listens on ("host:port"; port 0 picks
	// a free one). Serve ignores it.
	Addr string
	// Latency is added to every answer on the default route.
	Latency time.Duration
	// Jitter adds a further uniform [0, Jitter) per request on top of
	// Latency, so Latency stays a lower bound.
	Jitter time.Duration
	// ErrorRate is the fraction (0..1) of default-route requests answered
	// 500 instead of 200.
	ErrorRate float64
	// BodySize is the length in bytes of the 200 body: "ok" repeated and
	// cut to length. 0 means an empty body.
	BodySize int
	// Seed drives the error and jitter draws. With a fixed seed the number
	// of errors among the first N default-route requests is fixed, however
	// the requests interleave.
	Seed uint64
	// TLS serves HTTPS (HTTP/1.1 only, TLS 1.2 or later) with a self-signed
	// certificate made at start (Server.CertificatePEM), for measuring load
	// generators against a TLS target.
	TLS bool
	// Logger receives start, stop and net/http's own error lines — never a
	// line per request. nil discards.
	Logger *slog.Logger
	// Clock stamps started_at and measures uptime; nil means time.Now.
	// Latency is real time by design and does not use it.
	Clock func() time.Time
}

// DefaultConfig is a local target on 127.0.0.1:8080 answering "ok" at once.
func DefaultConfig() Config {
	return Config{
		Addr:     "127.0.0.1:8080",
		BodySize: DefaultBodySize,
		Seed:     1,
	}
}

// Validate reports every problem with the configuration at once, each
// naming its field.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}

	if c.Addr != "" {
		if _, port, err := net.SplitHostPort(c.Addr); err != nil {
			bad("Addr", "%q is not host:port: %v", c.Addr, err)
		} else if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			bad("Addr", "port %q in %q is not a number 0-65535", port, c.Addr)
		}
	}
	if c.Latency < 0 {
		bad("Latency", "must not be negative, got %s", c.Latency)
	}
	if c.Jitter < 0 {
		bad("Jitter", "must not be negative, got %s", c.Jitter)
	}
	// Checked one by one first so the sum cannot overflow.
	if c.Latency > MaxDelay || c.Jitter > MaxDelay || c.Latency+c.Jitter > MaxDelay {
		bad("Latency", "Latency+Jitter must be at most %s, got %s", MaxDelay, c.Latency+c.Jitter)
	}
	if math.IsNaN(c.ErrorRate) || c.ErrorRate < 0 || c.ErrorRate > 1 {
		bad("ErrorRate", "must be within 0..1, got %v", c.ErrorRate)
	}
	if c.BodySize < 0 || c.BodySize > MaxBodySize {
		bad("BodySize", "must be within 0..%d bytes, got %d", MaxBodySize, c.BodySize)
	}
	return errors.Join(errs...)
}
