package security

import (
	"container/list"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limit is one message class's token bucket: PerSecond tokens refill per
// second up to Burst. PerSecond == 0 means the class is not limited.
type Limit struct {
	PerSecond float64
	Burst     int
}

// RateLimitConfig configures a RateLimiter.
type RateLimitConfig struct {
	// Limits is indexed by message class.
	Limits []Limit
	// MaxSources bounds the remote addresses tracked. Default 65536.
	MaxSources int
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

const (
	defaultMaxSources = 1 << 16
	// Sharding as for ReplayGuard: small limiters keep one exact LRU, large
	// ones split it so receivers on many cores rarely share a lock.
	rateShards             = 16
	minSourcesPerRateShard = 256
)

// DefaultRateLimitConfig limits every one of numClasses classes to 20,000
// messages a second with bursts of 4,000 per remote address: far above what a
// healthy peer sends in a busy cluster, so it only bites on a runaway or
// hostile sender.
func DefaultRateLimitConfig(numClasses int) RateLimitConfig {
	limits := make([]Limit, max(numClasses, 0))
	for i := range limits {
		limits[i] = Limit{PerSecond: 20_000, Burst: 4_000}
	}
	return RateLimitConfig{Limits: limits, MaxSources: defaultMaxSources}
}

// Validate reports every problem in c at once, naming the field.
func (c RateLimitConfig) Validate() error {
	var errs []error
	for i, l := range c.Limits {
		if l.PerSecond < 0 || math.IsNaN(l.PerSecond) || math.IsInf(l.PerSecond, 0) {
			errs = append(errs, fmt.Errorf("Limits[%d].PerSecond is %v, must be finite and not negative (0 means unlimited)", i, l.PerSecond))
		} else if l.PerSecond > 0 && l.Burst < 1 {
			errs = append(errs, fmt.Errorf("Limits[%d].Burst is %d, must be at least 1 when PerSecond is set", i, l.Burst))
		}
	}
	if c.MaxSources < 0 {
		errs = append(errs, fmt.Errorf("MaxSources is %d, must not be negative", c.MaxSources))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("rate limit config: %w", err)
	}
	return nil
}

// RateLimiter keeps a token bucket per remote address and message class.
//
// The number of addresses is bounded: past MaxSources, the least recently
// seen address is forgotten. Forgetting only ever gives that address a full
// bucket again, so the bound can make the limiter more lenient, never refuse
// work it would otherwise accept.
type RateLimiter struct {
	limits []Limit
	now    func() time.Time
	seed   maphash.Seed
	shards []rateShard
}

type rateShard struct {
	mu      sync.Mutex
	max     int
	sources map[string]*list.Element // values are *rateSource
	lru     list.List                // front is most recently seen
	_       [64]byte                 // keep neighbouring shards' locks on separate cache lines
}

type rateSource struct {
	remote string
	// buckets is indexed by class and filled on first use, so an address
	// that only sends one class pays for one limiter.
	buckets []*rate.Limiter
}

// NewRateLimiter builds a limiter from cfg after validating it.
func NewRateLimiter(cfg RateLimitConfig) (*RateLimiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxSources == 0 {
		cfg.MaxSources = defaultMaxSources
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	n := 1
	if cfg.MaxSources >= rateShards*minSourcesPerRateShard {
		n = rateShards
	}
	r := &RateLimiter{
		limits: append([]Limit(nil), cfg.Limits...),
		now:    cfg.Now,
		seed:   maphash.MakeSeed(),
		shards: make([]rateShard, n),
	}
	per := (cfg.MaxSources + n - 1) / n
	for i := range r.shards {
		r.shards[i].max = per
		r.shards[i].sources = make(map[string]*list.Element)
	}
	return r, nil
}

// Allow takes a token for one message of class from remote. When it refuses,
// retryAfter is how long until a token will be available, for the sender to
// wait before trying again. A class outside the configured limits is always
// refused with retryAfter 0 (waiting will not help): it is a bug in the
// caller's table of classes, better found than left unlimited.
func (r *RateLimiter) Allow(remote string, class int) (ok bool, retryAfter time.Duration) {
	if class < 0 || class >= len(r.limits) {
		return false, 0
	}
	l := r.limits[class]
	if l.PerSecond == 0 {
		return true, 0
	}
	now := r.now()
	lim := r.bucket(remote, class, l)
	if lim.AllowN(now, 1) {
		return true, 0
	}
	return false, durationUntilToken(lim.TokensAt(now), l.PerSecond)
}

// bucket finds or creates remote's limiter for class and marks remote as
// recently seen.
func (r *RateLimiter) bucket(remote string, class int, l Limit) *rate.Limiter {
	s := &r.shards[r.shardOf(remote)]
	s.mu.Lock()
	defer s.mu.Unlock()
	var src *rateSource
	if e, ok := s.sources[remote]; ok {
		s.lru.MoveToFront(e)
		src = e.Value.(*rateSource)
	} else {
		if len(s.sources) >= s.max {
			oldest := s.lru.Back()
			delete(s.sources, s.lru.Remove(oldest).(*rateSource).remote)
		}
		src = &rateSource{remote: remote, buckets: make([]*rate.Limiter, len(r.limits))}
		s.sources[remote] = s.lru.PushFront(src)
	}
	if src.buckets[class] == nil {
		src.buckets[class] = rate.NewLimiter(rate.Limit(l.PerSecond), l.Burst)
	}
	return src.buckets[class]
}

// Len is the number of remote addresses tracked, for metrics.
func (r *RateLimiter) Len() int {
	n := 0
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		n += len(s.sources)
		s.mu.Unlock()
	}
	return n
}

func (r *RateLimiter) shardOf(remote string) int {
	if len(r.shards) == 1 {
		return 0
	}
	return int(maphash.String(r.seed, remote) % uint64(len(r.shards)))
}

// durationUntilToken is how long a bucket holding tokens (< 1) takes to
// refill to one token at perSecond. It is at least 1ns so a refusal always
// carries a positive retry-after.
func durationUntilToken(tokens, perSecond float64) time.Duration {
	ns := math.Ceil((1 - tokens) / perSecond * float64(time.Second))
	switch {
	case ns >= math.MaxInt64:
		return math.MaxInt64
	case ns < 1:
		return 1
	}
	return time.Duration(ns)
}
