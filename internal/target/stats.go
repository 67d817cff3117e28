package target

import (
	"net/http"
	"sync/atomic"
	"time"
)

// Stats is what GET /__stats returns. Requests counts every answered
// request: one whose response the server had begun to write. Control
// requests (/__stats, /__reset) are not counted.
//
// Each counter is exact. A snapshot taken while requests are in flight is
// not one instant across counters (ByMethod may be a request ahead of
// ByStatus); Requests and Errors are derived from ByStatus, so those three
// always agree. InFlight == 0 says the counts are final for now.
type Stats struct {
	Requests      uint64            `json:"requests"`
	Errors        uint64            `json:"errors"` // 5xx answered
	ByStatus      map[int]uint64    `json:"by_status"`
	ByMethod      map[string]uint64 `json:"by_method"`
	BytesIn       uint64            `json:"bytes_in"` // request body bytes read
	InFlight      int64             `json:"in_flight"`
	StartedAt     time.Time         `json:"started_at"`
	UptimeSeconds float64           `json:"uptime_seconds"`
}

// methods are the request methods counted by name; anything else is
// counted as "OTHER". Indexing by a switch keeps the hot path free of map
// writes and allocation.
var methods = [...]string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace, "OTHER",
}

const methodOther = len(methods) - 1

func methodIndex(m string) int {
	switch m {
	case http.MethodGet:
		return 0
	case http.MethodHead:
		return 1
	case http.MethodPost:
		return 2
	case http.MethodPut:
		return 3
	case http.MethodPatch:
		return 4
	case http.MethodDelete:
		return 5
	case http.MethodOptions:
		return 6
	case http.MethodConnect:
		return 7
	case http.MethodTrace:
		return 8
	}
	return methodOther
}

// maxStatus bounds the status codes the server ever writes (200..599).
const maxStatus = 600

// counters are the live tallies. The hot path touches two of them per
// answer (status and method) and two for the in-flight gauge; requests and
// errors are sums over byStatus, computed when read.
type counters struct {
	byStatus [maxStatus]atomic.Uint64
	byMethod [len(methods)]atomic.Uint64
	bytesIn  atomic.Uint64
	inFlight atomic.Int64
}

// count records one answer. It runs before the status line is written, so
// a client that has read a response can never see a count without it.
func (c *counters) count(code, method int) {
	c.byStatus[code].Add(1)
	c.byMethod[method].Add(1)
}

func (c *counters) snapshot() Stats {
	st := Stats{
		ByStatus: map[int]uint64{},
		ByMethod: map[string]uint64{},
		BytesIn:  c.bytesIn.Load(),
		InFlight: c.inFlight.Load(),
	}
	for code := range c.byStatus {
		n := c.byStatus[code].Load()
		if n == 0 {
			continue
		}
		st.ByStatus[code] = n
		st.Requests += n
		if code >= 500 {
			st.Errors += n
		}
	}
	for i := range c.byMethod {
		if n := c.byMethod[i].Load(); n != 0 {
			st.ByMethod[methods[i]] = n
		}
	}
	return st
}

// reset zeroes the counters (not the in-flight gauge, which is a level, not
// a count). Requests answered while a reset runs may land on either side of
// it; reset when traffic is quiet for a sharp line.
func (c *counters) reset() {
	for i := range c.byStatus {
		c.byStatus[i].Store(0)
	}
	for i := range c.byMethod {
		c.byMethod[i].Store(0)
	}
	c.bytesIn.Store(0)
}
