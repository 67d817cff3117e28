package api

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Sweeping bounds the limiter table: a full sweep at least every
// sweepEvery, and at most every sweepMinGap while the table is larger than
// sweepAbove (many clients at once).
const (
	sweepEvery  = time.Minute
	sweepMinGap = time.Second
	sweepAbove  = 4096
)

// ipLimiter keeps one token bucket per client IP.
type ipLimiter struct {
	limit rate.Limit
	burst int
	now   func() time.Time
	// idle is how long a bucket takes to refill completely. A bucket idle
	// for longer is full, exactly like a new one, so dropping it changes
	// nothing a client can observe; that is what keeps the table bounded by
	// the clients active within one refill time.
	idle time.Duration

	mu        sync.Mutex
	clients   map[string]*clientBucket
	lastSweep time.Time
}

type clientBucket struct {
	lim  *rate.Limiter
	seen time.Time
}

func newIPLimiter(perSecond float64, burst int, now func() time.Time) *ipLimiter {
	idle := time.Duration(math.MaxInt64)
	if refill := float64(burst) / perSecond * float64(time.Second); refill < float64(math.MaxInt64) {
		idle = time.Duration(refill)
	}
	return &ipLimiter{
		limit:   rate.Limit(perSecond),
		burst:   burst,
		now:     now,
		idle:    idle,
		clients: make(map[string]*clientBucket),
	}
}

// allow takes a token for ip. When none is left it reports how long until
// one will be, for Retry-After.
func (l *ipLimiter) allow(ip string) (ok bool, retryAfter time.Duration) {
	if l.limit == rate.Inf {
		return true, 0
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweepLocked(now)
	c := l.clients[ip]
	if c == nil {
		c = &clientBucket{lim: rate.NewLimiter(l.limit, l.burst)}
		l.clients[ip] = c
	}
	c.seen = now
	r := c.lim.ReserveN(now, 1)
	if !r.OK() {
		return false, time.Second
	}
	if d := r.DelayFrom(now); d > 0 {
		// Refused requests must not consume future tokens, or a client that
		// keeps retrying too fast would never get through.
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

func (l *ipLimiter) sweepLocked(now time.Time) {
	since := now.Sub(l.lastSweep)
	if since < sweepEvery && (len(l.clients) <= sweepAbove || since < sweepMinGap) {
		return
	}
	l.lastSweep = now
	for ip, c := range l.clients {
		if now.Sub(c.seen) > l.idle {
			delete(l.clients, ip)
		}
	}
}

// size reports how many clients have a bucket (for tests and metrics).
func (l *ipLimiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.clients)
}
