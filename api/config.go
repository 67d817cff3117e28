package api

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"tempest/internal/obs"
	"tempest/security"
	"tempest/workflow"
)

// DefaultListen is where a node serves the API when its config names no
// address, and where the CLI looks when neither --api nor TEMPEST_API is set,
// so one machine works with no configuration at all.
const DefaultListen = "127.0.0.1:7411"

// DefaultURL is the base URL of DefaultListen.
const DefaultURL = "http://" + DefaultListen

// NoLeaderRetryAfter is the Retry-After of a no_leader answer: about an
// election with the slower profiles (the header counts whole seconds).
const NoLeaderRetryAfter = time.Second

// ServerConfig configures the API server.
type ServerConfig struct {
	// Listen is the TCP address to serve on ("host:port"; port 0 picks one).
	Listen string
	// Token is the bearer token every /v1 request must carry. Required.
	Token string
	// TLSCertFile and TLSKeyFile switch on TLS when both are set.
	TLSCertFile string
	TLSKeyFile  string
	// TLSClientCAFile, with TLS, asks every client for a certificate
	// chaining to one of the CAs in this PEM file (mutual TLS), before any
	// request is read. The bearer token is still required. A follower
	// forwarding to the leader presents its own API certificate, which
	// must then also allow client authentication.
	TLSClientCAFile string
	// MaxBodyBytes caps a request body; more is answered 413.
	MaxBodyBytes int64
	// MaxParsing is how many job bodies are read and parsed at once; more
	// wait their turn (until RequestTimeout, then 503). A job file's parse
	// tree costs tens of times its size, so this times MaxBodyBytes bounds
	// what submissions can take of the node's memory.
	MaxParsing int
	// RateLimit is the requests per second each client IP may make on
	// average, RateBurst how many it may make at once. A follower
	// forwarding to the leader vouches for each request's original client
	// with a header only holders of the cluster secret can make (Keyring),
	// so the leader limits clients, not followers.
	RateLimit float64
	RateBurst int
	// RequestTimeout bounds each backend call (not event streams).
	RequestTimeout time.Duration
	// LeaderWait is how long a follower waits, rather than send the client
	// away, for the API address of a leader its election named (Elected),
	// and, when its leader turned out unreachable (the forward could not
	// be dialled), for the election to name another. A follower that
	// knows of no leader at all answers no_leader at once. Zero answers at
	// once in every case.
	LeaderWait time.Duration
	// StreamHeartbeat is how often an idle event stream sends a comment, so
	// proxies keep it open and clients can tell a dead stream from a quiet one.
	StreamHeartbeat time.Duration
	// Registry holds the workflow types job files may use. Required.
	Registry *workflow.Registry
	// Logger receives request logs at debug level; nil discards.
	Logger *slog.Logger
	// Role is reported by /healthz ("manager", "gate").
	Role string
	// Metrics is the node's Prometheus registry: the server registers its
	// own series in it and serves all of it at /metrics, so the role's
	// collectors registered there appear beside the API's. Nil gives the
	// server a registry of its own (obs.NewRegistry).
	Metrics *obs.Registry
	// Keyring signs the original client address on forwarded requests and
	// verifies it on forwarded requests received. Nil: no header is sent,
	// and every request is limited by its remote address.
	Keyring *security.Keyring
	// MetricsToken, when set, is the bearer token /metrics requires; empty
	// serves /metrics to anyone who reaches the API port, less the series
	// that name jobs unless MetricsJobSeries.
	MetricsToken string
	// MetricsJobSeries serves the series labelled with job ids and
	// workflow names without a MetricsToken; with one they are served to
	// whoever holds it (obs.ServeJobSeries).
	MetricsJobSeries bool
	// ForwardTLS is used when forwarding to a leader whose API URL is
	// https; nil means the system roots.
	ForwardTLS *tls.Config
	// Now is the clock for rate limiting; nil means time.Now.
	Now func() time.Time
}

// DefaultMaxParsing is MaxParsing when the config does not say: a few, so
// submissions from many clients go through in turn while one process's
// memory stays bounded (forty 1 MB bodies parsed at once took a manager to
// 2.5 GB).
const DefaultMaxParsing = 4

// DefaultServerConfig returns a config that works on one machine; Token and
// Registry must still be set.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{
		Listen:          DefaultListen,
		MaxBodyBytes:    DefaultMaxBodyBytes,
		MaxParsing:      DefaultMaxParsing,
		RateLimit:       50,
		RateBurst:       100,
		RequestTimeout:  30 * time.Second,
		LeaderWait:      3 * time.Second,
		StreamHeartbeat: 15 * time.Second,
		Role:            "manager",
	}
}

// Validate reports every problem with the config at once, each naming its
// field.
func (c *ServerConfig) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Listen == "" {
		add("Listen: required")
	}
	if c.Token == "" {
		add("Token: required (clients authenticate with it)")
	} else if strings.ContainsAny(c.Token, " \t\r\n") {
		add("Token: must not contain whitespace")
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		add("TLSCertFile, TLSKeyFile: set both for TLS, or neither")
	}
	if c.TLSClientCAFile != "" && c.TLSCertFile == "" {
		add("TLSClientCAFile: client certificates need TLS (TLSCertFile, TLSKeyFile)")
	}
	if strings.ContainsAny(c.MetricsToken, " \t\r\n") {
		add("MetricsToken: must not contain whitespace")
	}
	if c.MaxParsing < 1 {
		add("MaxParsing: must be at least 1, got %d", c.MaxParsing)
	}
	if c.MaxBodyBytes <= 0 {
		add("MaxBodyBytes: must be positive, got %d", c.MaxBodyBytes)
	}
	if !(c.RateLimit > 0) {
		add("RateLimit: must be positive (math.Inf(1) for no limit), got %v", c.RateLimit)
	}
	if c.RateBurst < 1 {
		add("RateBurst: must be at least 1, got %d", c.RateBurst)
	}
	if c.RequestTimeout <= 0 {
		add("RequestTimeout: must be positive, got %s", c.RequestTimeout)
	}
	if c.StreamHeartbeat <= 0 {
		add("StreamHeartbeat: must be positive, got %s", c.StreamHeartbeat)
	}
	if c.Registry == nil {
		add("Registry: required (job files are parsed with it)")
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("api config: %w", errors.Join(errs...))
}
