package api

import (
	"cmp"
	"fmt"
	"io"
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
}

func newAPIMetrics() *apiMetrics {
	return &apiMetrics{requests: make(map[requestKey]uint64)}
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
	forwarded, streams, streamsSeen, badClient := m.forwarded, m.streams, m.streamsSeen, m.badClient
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
