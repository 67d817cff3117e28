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
	messagesIn, messagesOut       atomic.Uint64
	bytesIn, bytesOut             atomic.Uint64
	authFailures, replaysDropped  atomic.Uint64
	rateLimited, malformed        atomic.Uint64
	tooLarge, callErrors, breaker atomic.Uint64
	connsRefused, helloTimeouts   atomic.Uint64
	roleRefused                   atomic.Uint64

	mu       sync.Mutex
	breakers map[breakerKey]string
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
		MessagesIn:     c.messagesIn.Load(),
		MessagesOut:    c.messagesOut.Load(),
		BytesIn:        c.bytesIn.Load(),
		BytesOut:       c.bytesOut.Load(),
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
	}
	c.mu.Lock()
	for k, st := range c.breakers {
		s.Breakers = append(s.Breakers, BreakerState{Peer: k.peer, Class: k.class.String(), State: st})
	}
	c.mu.Unlock()
	return s
}
