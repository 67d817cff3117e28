// Package transport moves wire messages between nodes. Roles and the
// leadership package depend on the Transport interface only; production
// wiring uses the QUIC implementation (quic.go) and unit tests use the
// in-memory Hub (hub.go), which can partition, heal and drop.
package transport

import (
	"context"

	"tempest/wire"
)

// Peer identifies who sent a message. NodeID is proven by the sealed
// envelope (only a holder of the cluster secret can produce it); Addr is the
// network address the message arrived from.
type Peer struct {
	NodeID string
	Addr   string
}

// Handler serves one message type. For a request it returns the reply; for a
// one-way message the reply is discarded. Returning a *wire.Error sends that
// typed error to the caller; any other error is sent as CodeInternal with the
// text sanitized.
type Handler func(ctx context.Context, from Peer, msg wire.Message) (wire.Message, error)

// Transport sends and receives wire messages.
type Transport interface {
	// LocalID is this node's id, stamped on every envelope it sends.
	LocalID() string
	// Addr is the address peers use to reach this node.
	Addr() string
	// Handle registers h for messages of type t. Register before traffic
	// arrives; a later registration replaces the earlier one.
	Handle(t wire.MsgType, h Handler)
	// Call sends req to addr and waits for the reply or ctx's end. A typed
	// error reply comes back as a *wire.Error.
	Call(ctx context.Context, addr string, req wire.Message, opts ...CallOption) (wire.Message, error)
	// Send delivers msg to addr without waiting for a reply. It returns once
	// the message is handed to the network (or fails to be).
	Send(ctx context.Context, addr string, msg wire.Message) error
	// Close stops serving, closes connections and waits for in-flight
	// handlers to return.
	Close() error
}

// CallOption adjusts one Call.
type CallOption func(*callOptions)

type callOptions struct {
	retries    int
	idempotent bool
}

// WithRetries allows up to n further attempts after a failure that certainly
// did not reach the peer's handler (dial failure, refused stream, rate limit).
func WithRetries(n int) CallOption { return func(o *callOptions) { o.retries = n } }

// Idempotent marks the request safe to repeat even when a failure leaves it
// unknown whether the peer ran it (timeouts, lost connections).
func Idempotent() CallOption { return func(o *callOptions) { o.idempotent = true } }

func applyCallOptions(opts []CallOption) callOptions {
	if len(opts) == 0 {
		// Most calls pass none; o below escapes through the option funcs.
		return callOptions{}
	}
	var o callOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}
