package api

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// requestKey labels one request counter. Every label takes values from a
// closed set (known methods, registered routes, statuses this server writes),
// so no client can grow the metric's cardinality.
type requestKey struct {
	method string
	route  string
	code   int
}

// apiMetrics counts what the HTTP layer does. It is written by hand in the
// text exposition format 0.0.4 so the API needs no Prometheus dependency.
type apiMetrics struct {
	mu          sync.Mutex
	requests    map[requestKey]uint64
	forwarded   uint64
	badClient   uint64 // forwarded-client headers that did not verify
	streams     int64  // event streams open now
	streamsSeen uint64
	// served: open connections, and whether one of their requests reached
	// a handler; one closed before that is counted in unserved (a slow
	// client cut by the header timeout, or one that connected and left).
	// net/http's StateActive comes with the first byte, so it cannot tell.
	served   map[net.Conn]bool
	unserved uint64
}

// connKey carries a request's connection in its context, for servedOn.
type connKey struct{}

func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// servedOn marks the connection of a request that reached a handler.
func (m *apiMetrics) servedOn(ctx context.Context) {
	c, ok := ctx.Value(connKey{}).(net.Conn)
	if !ok {
		return
	}
	m.mu.Lock()
	if _, open := m.served[c]; open {
		m.served[c] = true
	}
	m.mu.Unlock()
}

func newAPIMetrics() *apiMetrics {
	return &apiMetrics{requests: make(map[requestKey]uint64), served: make(map[net.Conn]bool)}
}

// connState is the server's ConnState hook; the map holds only open
// connections, so it is bounded by them.
func (m *apiMetrics) connState(c net.Conn, st http.ConnState) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch st {
	case http.StateNew:
		m.served[c] = false
	case http.StateClosed, http.StateHijacked:
		if served, ok := m.served[c]; ok && !served {
			m.unserved++
		}
		delete(m.served, c)
	}
}

func (m *apiMetrics) request(method, route string, code int) {
	switch method {
	case "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS":
	default:
		method = "other"
	}
	m.mu.Lock()
	m.requests[requestKey{method, route, code}]++
	m.mu.Unlock()
}

func (m *apiMetrics) forward() {
	m.mu.Lock()
	m.forwarded++
	m.mu.Unlock()
}

func (m *apiMetrics) badClientHeader() {
	m.mu.Lock()
	m.badClient++
	m.mu.Unlock()
}

func (m *apiMetrics) streamOpened() {
	m.mu.Lock()
	m.streams++
	m.streamsSeen++
	m.mu.Unlock()
}

func (m *apiMetrics) streamClosed() {
	m.mu.Lock()
	m.streams--
	m.mu.Unlock()
}

// write renders the counters, sorted so scrapes diff cleanly.
func (m *apiMetrics) write(w io.Writer, rateLimitClients int) {
	m.mu.Lock()
	keys := make([]requestKey, 0, len(m.requests))
	for k := range m.requests {
		keys = append(keys, k)
	}
	counts := make([]uint64, len(keys))
	slices.SortFunc(keys, func(a, b requestKey) int {
		return cmp.Or(cmp.Compare(a.route, b.route), cmp.Compare(a.method, b.method), cmp.Compare(a.code, b.code))
	})
	for i, k := range keys {
		counts[i] = m.requests[k]
	}
	forwarded, streams, streamsSeen, badClient, unserved := m.forwarded, m.streams, m.streamsSeen, m.badClient, m.unserved
	m.mu.Unlock()

	fmt.Fprintln(w, "# HELP tempest_api_requests_total HTTP API requests by method, route and status code.")
	fmt.Fprintln(w, "# TYPE tempest_api_requests_total counter")
	for i, k := range keys {
		fmt.Fprintf(w, "tempest_api_requests_total{method=\"%s\",route=\"%s\",code=\"%d\"} %d\n",
			escapeLabel(k.method), escapeLabel(k.route), k.code, counts[i])
	}
	fmt.Fprintln(w, "# HELP tempest_api_forwarded_requests_total API requests this follower forwarded to the leader.")
	fmt.Fprintln(w, "# TYPE tempest_api_forwarded_requests_total counter")
	fmt.Fprintf(w, "tempest_api_forwarded_requests_total %d\n", forwarded)
	fmt.Fprintln(w, "# HELP tempest_api_untrusted_client_headers_total Forwarded-client headers that did not verify (the request was limited by its remote address).")
	fmt.Fprintln(w, "# TYPE tempest_api_untrusted_client_headers_total counter")
	fmt.Fprintf(w, "tempest_api_untrusted_client_headers_total %d\n", badClient)
	fmt.Fprintln(w, "# HELP tempest_api_event_streams Job event streams open now.")
	fmt.Fprintln(w, "# TYPE tempest_api_event_streams gauge")
	fmt.Fprintf(w, "tempest_api_event_streams %d\n", streams)
	fmt.Fprintln(w, "# HELP tempest_api_event_streams_total Job event streams opened.")
	fmt.Fprintln(w, "# TYPE tempest_api_event_streams_total counter")
	fmt.Fprintf(w, "tempest_api_event_streams_total %d\n", streamsSeen)
	fmt.Fprintln(w, "# HELP tempest_api_conns_closed_without_request_total Connections closed before a whole request arrived: slow clients cut by the header timeout, or clients that connected and left.")
	fmt.Fprintln(w, "# TYPE tempest_api_conns_closed_without_request_total counter")
	fmt.Fprintf(w, "tempest_api_conns_closed_without_request_total %d\n", unserved)
	fmt.Fprintln(w, "# HELP tempest_api_rate_limit_clients Client IPs holding a rate-limit bucket.")
	fmt.Fprintln(w, "# TYPE tempest_api_rate_limit_clients gauge")
	fmt.Fprintf(w, "tempest_api_rate_limit_clients %d\n", rateLimitClients)
}

// escapeLabel escapes a label value as the text format requires: backslash,
// double quote and newline.
func escapeLabel(s string) string {
	if !strings.ContainsAny(s, "\\\"\n") {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '\\':
			b.WriteString(`\\`)
		case '"':
			b.WriteString(`\"`)
		case '\n':
			b.WriteString(`\n`)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
