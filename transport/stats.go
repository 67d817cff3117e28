package transport

import (
	"sync"
	"sync/atomic"

	"tempest/wire"
)

// Stats is a point-in-time copy of a transport's counters. Roles publish it
// (Prometheus, `tempest cluster`) through the StatsSource interface.
type Stats struct {
	MessagesIn     uint64
	MessagesOut    uint64
	BytesIn        uint64
	BytesOut       uint64
	AuthFailures   uint64 // hellos and envelopes that did not verify with any accepted key, or named another sender
	ConnsRefused   uint64 // inbound connections refused by a connection limit
	HelloTimeouts  uint64 // inbound connections closed for not completing their hello in time
	RoleRefused    uint64 // requests of a type the peer's key tier may not send (a worker key sending a vote)
	ReplaysDropped uint64 // duplicate ids, or timestamps outside the window
	RateLimited    uint64 // refused with a retry-after
	Malformed      uint64 // undecodable frames, envelopes or bodies
	TooLarge       uint64 // frames over the size cap
	CallErrors     uint64 // calls that ended in an error at this node
	// LeftWriteQueue counts calls whose context ended while their frame
	// waited behind another write on its stream: the caller got its error,
	// and the frame still went out whole with its batch.
	LeftWriteQueue uint64
	// RepliesStalled counts replies not written within ReplyTimeout: the
	// caller stopped reading, and its stream was reset to free the
	// handler's slot.
	RepliesStalled uint64
	BreakerChanges uint64 // circuit breaker state transitions
	// Breakers lists every breaker that is not closed, by peer and class.
	Breakers []BreakerState
}

// BreakerState names one non-closed circuit.
type BreakerState struct {
	Peer  string
	Class string
	State string // "open" or "half-open"
}

// StatsSource is implemented by transports that keep counters.
type StatsSource interface {
	Stats() Stats
}

type counters struct {
	// io counts messages and bytes, in shards: every message bumps them,
	// from every core, and one cache line shared by them all was a cost
	// every round trip paid four times on each end. A stream keeps to one
	// shard (ioShard); Stats sums them.
	io     [ioShards]ioCounters
	nextIO atomic.Uint32

	authFailures, replaysDropped  atomic.Uint64
	rateLimited, malformed        atomic.Uint64
	tooLarge, callErrors, breaker atomic.Uint64
	connsRefused, helloTimeouts   atomic.Uint64
	roleRefused, repliesStalled   atomic.Uint64

	mu       sync.Mutex
	breakers map[breakerKey]string
}

const ioShards = 16

type ioCounters struct {
	messagesIn, messagesOut atomic.Uint64
	bytesIn, bytesOut       atomic.Uint64
	leftQueue               atomic.Uint64
	_                       [88]byte // a shard per pair of cache lines
}

// in counts one inbound frame of n payload bytes (plus its length prefix).
func (c *ioCounters) in(n int) {
	c.messagesIn.Add(1)
	c.bytesIn.Add(uint64(n + frameHeaderLen))
}

// out counts one outbound frame of n bytes, length prefix included.
func (c *ioCounters) out(n int) {
	c.messagesOut.Add(1)
	c.bytesOut.Add(uint64(n))
}

// ioShard hands a new stream the shard it counts in.
func (c *counters) ioShard() *ioCounters {
	return &c.io[c.nextIO.Add(1)%ioShards]
}

type breakerKey struct {
	peer  string
	class wire.Class
}

func (c *counters) setBreaker(k breakerKey, state string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.breakers == nil {
		c.breakers = make(map[breakerKey]string)
	}
	if state == "closed" {
		delete(c.breakers, k)
	} else {
		c.breakers[k] = state
	}
}

func (c *counters) snapshot() Stats {
	s := Stats{
		AuthFailures:   c.authFailures.Load(),
		ConnsRefused:   c.connsRefused.Load(),
		HelloTimeouts:  c.helloTimeouts.Load(),
		RoleRefused:    c.roleRefused.Load(),
		ReplaysDropped: c.replaysDropped.Load(),
		RateLimited:    c.rateLimited.Load(),
		Malformed:      c.malformed.Load(),
		TooLarge:       c.tooLarge.Load(),
		CallErrors:     c.callErrors.Load(),
		BreakerChanges: c.breaker.Load(),
		RepliesStalled: c.repliesStalled.Load(),
	}
	for i := range c.io {
		sh := &c.io[i]
		s.MessagesIn += sh.messagesIn.Load()
		s.MessagesOut += sh.messagesOut.Load()
		s.BytesIn += sh.bytesIn.Load()
		s.BytesOut += sh.bytesOut.Load()
		s.LeftWriteQueue += sh.leftQueue.Load()
	}
	c.mu.Lock()
	for k, st := range c.breakers {
		s.Breakers = append(s.Breakers, BreakerState{Peer: k.peer, Class: k.class.String(), State: st})
	}
	c.mu.Unlock()
	return s
}
