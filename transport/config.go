package transport

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"tempest/security"
)

// Config configures the QUIC transport. Zero fields take the defaults of
// DefaultConfig.
type Config struct {
	// NodeID is stamped on every envelope and is how receivers know us.
	NodeID string
	// ListenAddr is the UDP address to bind ("127.0.0.1:0" picks a port).
	// The same socket dials out, so peers see this address as our source.
	ListenAddr string
	// AdvertiseAddr is what Addr returns; defaults to the bound address.
	AdvertiseAddr string
	// Keyring seals outgoing and opens incoming envelopes. Reloading it
	// (SIGHUP) takes effect on the next message.
	Keyring *security.Keyring

	Replay    security.ReplayConfig
	RateLimit security.RateLimitConfig

	// StreamsPerPeer long-lived streams are opened to each peer and calls
	// are spread over them; several streams avoid head-of-line blocking
	// behind a large message without paying a stream open per call.
	StreamsPerPeer int
	// MaxInflight bounds concurrently running handlers; past it, reading
	// stops and QUIC flow control pushes back on senders.
	MaxInflight int

	DialTimeout  time.Duration
	CallTimeout  time.Duration // applied when the caller's ctx has no deadline
	IdleTimeout  time.Duration
	KeepAlive    time.Duration
	DrainTimeout time.Duration // Close waits this long for in-flight handlers
	Linger       time.Duration // then this long for their replies to leave

	// ReplyTimeout bounds writing one reply. A reply's write blocks while
	// the caller's flow-control window is shut, and a caller that stopped
	// reading (paused, wedged, or hostile) never opens it: without a bound
	// the handler's slot is held for good, and MaxInflight of them stop
	// the node reading from anyone. It must outlast the longest a caller
	// waits for a large reply (sync pages, blobs) on a loaded path.
	ReplyTimeout time.Duration

	Breaker BreakerConfig
	Backoff BackoffConfig
	// Limits bound what inbound connections cost, above all before they
	// have proven the secret.
	Limits Limits

	Logger *slog.Logger
	Now    func() time.Time
}

// BreakerConfig tunes the per-peer, per-class circuit breakers.
type BreakerConfig struct {
	// ConsecutiveFailures trips the breaker.
	ConsecutiveFailures uint32
	// OpenFor is how long an open breaker fails fast before letting one
	// probe call through (half-open).
	OpenFor time.Duration
}

// Limits bound inbound connections. A connection is pending from its first
// packet until its hello verifies; only pending connections can come from
// someone without the secret, so their limits are tight, while the limits on
// all connections are sized for a cluster whose nodes share one address
// (a local dev cluster on 127.0.0.1).
type Limits struct {
	// HelloTimeout is how long a new inbound connection has, once its TLS
	// handshake is done, to send a hello that verifies.
	HelloTimeout time.Duration
	// MaxPendingConns and MaxPendingPerIP cap connections awaiting their
	// hello, in total and per source IP.
	MaxPendingConns int
	MaxPendingPerIP int
	// MaxConns and MaxConnsPerIP cap every inbound connection.
	MaxConns      int
	MaxConnsPerIP int
	// ConnsPerSecondPerIP and ConnBurstPerIP rate-limit new inbound
	// connections by source IP (not IP and port, which an attacker can
	// rotate).
	ConnsPerSecondPerIP float64
	ConnBurstPerIP      int
	// PreAuthWindow is a new connection's QUIC receive window; it grows
	// (up to 16 MiB per stream, 64 MiB per connection) only once the hello
	// has verified, so a pending connection buffers at most about this much.
	PreAuthWindow uint64
}

// BackoffConfig shapes retries: wait = rand[0, min(Max, Base*2^attempt)).
type BackoffConfig struct {
	Base time.Duration
	Max  time.Duration
}

// DefaultConfig returns settings that work for a cluster on one LAN.
func DefaultConfig() Config {
	return Config{
		ListenAddr:     "127.0.0.1:0",
		Replay:         security.ReplayConfig{Window: 60 * time.Second, MaxEntries: 1 << 20},
		RateLimit:      security.DefaultRateLimitConfig(numClasses()),
		StreamsPerPeer: 4,
		MaxInflight:    1024,
		DialTimeout:    3 * time.Second,
		CallTimeout:    10 * time.Second,
		ReplyTimeout:   2 * time.Minute,
		IdleTimeout:    30 * time.Second,
		KeepAlive:      5 * time.Second,
		DrainTimeout:   5 * time.Second,
		Linger:         200 * time.Millisecond,
		Breaker:        BreakerConfig{ConsecutiveFailures: 5, OpenFor: 5 * time.Second},
		Backoff:        BackoffConfig{Base: 50 * time.Millisecond, Max: 2 * time.Second},
		Limits: Limits{
			HelloTimeout:        5 * time.Second,
			MaxPendingConns:     64,
			MaxPendingPerIP:     8,
			MaxConns:            4096,
			MaxConnsPerIP:       512,
			ConnsPerSecondPerIP: 20,
			ConnBurstPerIP:      40,
			PreAuthWindow:       64 << 10,
		},
		Logger: slog.Default(),
		Now:    time.Now,
	}
}

// orDefault sets *v to d when it is zero or negative (a setting left out).
func orDefault[T int | uint32 | float64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.ListenAddr == "" {
		c.ListenAddr = d.ListenAddr
	}
	if c.Replay.Window == 0 {
		c.Replay.Window = d.Replay.Window
	}
	if c.Replay.MaxEntries == 0 {
		c.Replay.MaxEntries = d.Replay.MaxEntries
	}
	if c.Replay.Now == nil {
		c.Replay.Now = c.Now
	}
	if c.RateLimit.Limits == nil {
		c.RateLimit = d.RateLimit
	}
	orDefault(&c.StreamsPerPeer, d.StreamsPerPeer)
	orDefault(&c.MaxInflight, d.MaxInflight)
	orDefault(&c.DialTimeout, d.DialTimeout)
	orDefault(&c.CallTimeout, d.CallTimeout)
	orDefault(&c.ReplyTimeout, d.ReplyTimeout)
	orDefault(&c.IdleTimeout, d.IdleTimeout)
	orDefault(&c.KeepAlive, d.KeepAlive)
	orDefault(&c.DrainTimeout, d.DrainTimeout)
	orDefault(&c.Linger, d.Linger)
	orDefault(&c.Breaker.ConsecutiveFailures, d.Breaker.ConsecutiveFailures)
	orDefault(&c.Breaker.OpenFor, d.Breaker.OpenFor)
	orDefault(&c.Backoff.Base, d.Backoff.Base)
	orDefault(&c.Backoff.Max, d.Backoff.Max)
	orDefault(&c.Limits.HelloTimeout, d.Limits.HelloTimeout)
	orDefault(&c.Limits.MaxPendingConns, d.Limits.MaxPendingConns)
	orDefault(&c.Limits.MaxPendingPerIP, d.Limits.MaxPendingPerIP)
	orDefault(&c.Limits.MaxConns, d.Limits.MaxConns)
	orDefault(&c.Limits.MaxConnsPerIP, d.Limits.MaxConnsPerIP)
	orDefault(&c.Limits.ConnsPerSecondPerIP, d.Limits.ConnsPerSecondPerIP)
	orDefault(&c.Limits.ConnBurstPerIP, d.Limits.ConnBurstPerIP)
	if c.Limits.PreAuthWindow == 0 {
		c.Limits.PreAuthWindow = d.Limits.PreAuthWindow
	}
	if c.Logger == nil {
		c.Logger = d.Logger
	}
	if c.Now == nil {
		c.Now = d.Now
	}
	if c.Replay.Now == nil {
		c.Replay.Now = c.Now
	}
	if c.RateLimit.Now == nil {
		c.RateLimit.Now = c.Now
	}
	return c
}

// Validate reports every problem at once, naming the field.
func (c Config) Validate() error {
	var errs []error
	if c.NodeID == "" {
		errs = append(errs, errors.New("NodeID: required"))
	} else if len(c.NodeID) > 255 {
		errs = append(errs, fmt.Errorf("NodeID: %d bytes, at most 255", len(c.NodeID)))
	}
	if c.Keyring == nil {
		errs = append(errs, errors.New("Keyring: required (built from AUTH_SECRET)"))
	}
	if len(c.RateLimit.Limits) != 0 && len(c.RateLimit.Limits) < numClasses() {
		errs = append(errs, fmt.Errorf("RateLimit.Limits: %d entries, need one per message class (%d)", len(c.RateLimit.Limits), numClasses()))
	}
	return errors.Join(errs...)
}
