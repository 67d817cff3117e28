package security

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"sync"
	"time"
)

// Errors from ReplayGuard.Check, wrapped with context; test with errors.Is.
var (
	// ErrReplay: this (sender, id) was already accepted inside the window.
	ErrReplay = errors.New("replayed message")
	// ErrStale: the timestamp is outside the window around now, or older
	// than what a full guard still remembers.
	ErrStale = errors.New("stale message")
)

// ReplayConfig configures a ReplayGuard. Zero fields take the defaults.
type ReplayConfig struct {
	// Window is how far a timestamp may be from now, either way, and so how
	// long an id is remembered. Default 60s.
	Window time.Duration
	// MaxEntries bounds the ids remembered. Default 1<<20.
	MaxEntries int
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

const (
	defaultReplayWindow     = 60 * time.Second
	defaultReplayMaxEntries = 1 << 20
	// replayBucketsPerWindow sets the bucket width to window/60: one second
	// for the default window. Memory may hold one bucket width beyond the
	// window; eviction under pressure drops one bucket at a time.
	replayBucketsPerWindow = 60
	// replayShards splits the guard so concurrent receivers rarely contend.
	// A key always maps to one shard and each shard keeps its own floor, so
	// the no-replay guarantee holds per shard and therefore overall.
	replayShards = 32
	// Below this many entries per shard, one shard is used, so small guards
	// evict in exactly the documented order.
	minEntriesPerReplayShard = 1024
)

// ReplayGuard remembers the (sender, id) pairs it has accepted and refuses
// them again, and refuses timestamps outside ±Window of now.
//
// Entries are kept in buckets by sent time. A bucket is dropped whole, either
// once every timestamp in it is outside the window or, when MaxEntries is
// reached, as the oldest bucket. Dropping a bucket raises a floor: a message
// sent before the end of any dropped bucket is refused as stale. So an id
// that was accepted is either still remembered or below the floor, and a
// replay is never accepted, even if the clock steps backwards. The price of
// the bound is that under overload a fresh message older than the floor is
// refused.
//
// Senders are stored as a keyed 64-bit hash, not as strings: a collision
// could only refuse a fresh message (never accept a replay), the seed is
// random per guard, and pointer-free map entries keep a million-entry guard
// cheap for the garbage collector.
type ReplayGuard struct {
	window time.Duration
	width  int64 // bucket width in nanoseconds
	now    func() time.Time
	seed   maphash.Seed
	shards []replayShard
}

type replayKey struct {
	sender uint64
	id     uint64
}

type replayShard struct {
	mu sync.Mutex
	// buckets maps a bucket index (sent time / width) to its entries; a
	// window spans about 2*replayBucketsPerWindow of them.
	buckets map[int64]map[replayKey]struct{}
	// order holds the keys of buckets in ascending order. Buckets are only
	// ever dropped from the old end, so expiry and eviction are a look at
	// order[0]; a new bucket costs a binary search and a short copy.
	order []int64
	count int
	max   int
	// floor is the lowest bucket index still accepted: one past the newest
	// bucket ever dropped.
	floor int64
	_     [64]byte // keep neighbouring shards' locks on separate cache lines
}

// Validate reports every problem in c at once, naming the field.
func (c ReplayConfig) Validate() error {
	var errs []error
	if c.Window < 0 {
		errs = append(errs, fmt.Errorf("Window is %s, must not be negative (0 means %s)", c.Window, defaultReplayWindow))
	}
	if c.MaxEntries < 0 {
		errs = append(errs, fmt.Errorf("MaxEntries is %d, must not be negative (0 means %d)", c.MaxEntries, defaultReplayMaxEntries))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("replay guard config: %w", err)
	}
	return nil
}

// NewReplayGuard builds a guard from cfg after validating it, filling in
// defaults for zero fields.
func NewReplayGuard(cfg ReplayConfig) (*ReplayGuard, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Window == 0 {
		cfg.Window = defaultReplayWindow
	}
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = defaultReplayMaxEntries
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	n := 1
	if cfg.MaxEntries >= replayShards*minEntriesPerReplayShard {
		n = replayShards
	}
	g := &ReplayGuard{
		window: cfg.Window,
		width:  max(int64(cfg.Window)/replayBucketsPerWindow, 1),
		now:    cfg.Now,
		seed:   maphash.MakeSeed(),
		shards: make([]replayShard, n),
	}
	per := (cfg.MaxEntries + n - 1) / n
	for i := range g.shards {
		g.shards[i] = replayShard{
			buckets: make(map[int64]map[replayKey]struct{}),
			max:     per,
			floor:   math.MinInt64,
		}
	}
	return g, nil
}

// Check accepts a message from sender with id, sent at sent, and remembers
// it; or refuses it with an error wrapping ErrStale or ErrReplay. Call it
// only after the envelope has been authenticated, so sender, id and sent are
// the sender's own.
func (g *ReplayGuard) Check(sender string, id uint64, sent time.Time) error {
	// Snowflake timestamps are wall-clock readings from another machine;
	// compare wall with wall, never with this process's monotonic clock.
	now, sent := g.now().Round(0), sent.Round(0)
	if d := sent.Sub(now); d < -g.window || d > g.window {
		return fmt.Errorf("message %d from %s sent at %s is outside ±%s of %s: %w",
			id, sender, sent.UTC().Format(time.RFC3339Nano), g.window, now.UTC().Format(time.RFC3339Nano), ErrStale)
	}
	k := replayKey{sender: maphash.String(g.seed, sender), id: id}
	b := floorDiv(sent.UnixNano(), g.width)
	s := &g.shards[g.shardOf(k)]

	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(g.expiryCut(now))
	if b < s.floor {
		return g.belowFloor(sender, id, sent, s.floor)
	}
	bucket := s.buckets[b]
	if bucket != nil && s.count < s.max {
		// The common case, in one probe of the map: remember the id, and
		// find it was already there if the bucket did not grow.
		n := len(bucket)
		bucket[k] = struct{}{}
		if len(bucket) == n {
			return fmt.Errorf("message %d from %s: %w", id, sender, ErrReplay)
		}
		s.count++
		return nil
	}
	if _, seen := bucket[k]; seen {
		return fmt.Errorf("message %d from %s: %w", id, sender, ErrReplay)
	}
	for s.count >= s.max {
		s.dropOldest()
	}
	if b < s.floor {
		// Making room dropped this message's own bucket, or a newer one.
		// The message was never seen, but keeping the rule "below the floor
		// is stale" without exceptions is what makes the guarantee easy to
		// check.
		return g.belowFloor(sender, id, sent, s.floor)
	}
	if bucket == nil {
		// Size a new bucket like the newest one: traffic is steady from
		// second to second, and growing a map step by step costs more than
		// the lookup itself.
		hint := 0
		if n := len(s.order); n > 0 {
			hint = len(s.buckets[s.order[n-1]])
		}
		bucket = make(map[replayKey]struct{}, hint)
		s.buckets[b] = bucket
		i, _ := slices.BinarySearch(s.order, b)
		s.order = slices.Insert(s.order, i, b)
	}
	bucket[k] = struct{}{}
	s.count++
	return nil
}

func (g *ReplayGuard) belowFloor(sender string, id uint64, sent time.Time, floor int64) error {
	return fmt.Errorf("message %d from %s sent at %s is older than %s, before which the replay guard has forgotten what it saw (it was full, or the clock stepped back): %w",
		id, sender, sent.UTC().Format(time.RFC3339Nano), time.Unix(0, floor*g.width).UTC().Format(time.RFC3339Nano), ErrStale)
}

// Len is the number of ids remembered, for metrics. Ids that have aged out
// of the window are not counted.
func (g *ReplayGuard) Len() int {
	cut := g.expiryCut(g.now())
	n := 0
	for i := range g.shards {
		s := &g.shards[i]
		s.mu.Lock()
		s.expire(cut)
		n += s.count
		s.mu.Unlock()
	}
	return n
}

// expiryCut is the lowest bucket index that may still hold a timestamp
// inside the window at now.
func (g *ReplayGuard) expiryCut(now time.Time) int64 {
	return floorDiv(now.UnixNano()-int64(g.window), g.width)
}

func (g *ReplayGuard) shardOf(k replayKey) int {
	if len(g.shards) == 1 {
		return 0
	}
	// The sender hash is already uniform; mixing in the id spreads one busy
	// sender over all shards.
	h := (k.sender ^ k.id) * 0x9e3779b97f4a7c15
	return int((h >> 32) % uint64(len(g.shards)))
}

// expire drops every bucket below cut, whose timestamps are all outside the
// window now. Dropping raises the floor, so a clock that later steps back
// cannot bring those forgotten ids back inside the window.
func (s *replayShard) expire(cut int64) {
	for len(s.order) > 0 && s.order[0] < cut {
		s.dropOldest()
	}
}

// dropOldest forgets the oldest bucket and refuses its time range from now
// on. Check calls it directly to make room when the shard is full.
func (s *replayShard) dropOldest() {
	b := s.order[0]
	s.order = slices.Delete(s.order, 0, 1)
	s.count -= len(s.buckets[b])
	delete(s.buckets, b)
	s.floor = max(s.floor, b+1)
}

// floorDiv divides rounding toward negative infinity, so bucket boundaries
// are uniform on both sides of the Unix epoch.
func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}
