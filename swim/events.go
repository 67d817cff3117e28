package swim

import (
	"context"
	"log/slog"
	"sync"
)

// EventHandler receives membership changes about peers; the local node's own
// join, update and leave are not reported. Any field may be nil.
//
// Callbacks run one at a time, in the order memberlist reported the changes,
// on a goroutine owned by the Node, so they may take locks and call Node
// methods such as Members. A slow callback delays later events but never
// failure detection. They must not call Shutdown or Leave (Shutdown waits
// for the running callback), and none runs after Shutdown returns.
type EventHandler struct {
	// OnJoin: a node joined, or came back after being dead or gone.
	OnJoin func(NodeInfo)
	// OnUpdate: a member's metadata or address changed.
	OnUpdate func(NodeInfo)
	// OnDead: a member is gone. State tells how: StateDead after its
	// suspicion timer expired (it failed), StateLeft when it left
	// gracefully (NodeInfo.Left). One callback for both, so a role cannot
	// forget to handle one of them.
	OnDead func(NodeInfo)
}

type eventKind uint8

const (
	eventJoin eventKind = iota
	eventUpdate
	eventDead
)

func (k eventKind) String() string {
	switch k {
	case eventJoin:
		return "join"
	case eventUpdate:
		return "update"
	}
	return "dead"
}

type event struct {
	kind eventKind
	node NodeInfo
}

// queueWarnDepth is a backlog at which the handler is clearly falling
// behind membership churn; worth one warning per episode.
const queueWarnDepth = 1024

// eventQueue decouples memberlist's goroutines, which call the event
// delegate while holding memberlist's node lock, from role callbacks. The
// queue is unbounded on purpose: blocking would stall failure detection and
// dropping would leave a role believing a dead node alive. Its size is
// bounded in practice by membership churn, which is small.
type eventQueue struct {
	h   EventHandler
	log *slog.Logger

	mu      sync.Mutex
	pending []event
	warned  bool
	wake    chan struct{} // capacity 1: "pending may be non-empty"
}

func newEventQueue(h EventHandler, log *slog.Logger) *eventQueue {
	return &eventQueue{h: h, log: log, wake: make(chan struct{}, 1)}
}

// push never blocks.
func (q *eventQueue) push(e event) {
	q.mu.Lock()
	q.pending = append(q.pending, e)
	depth := len(q.pending)
	warn := depth >= queueWarnDepth && !q.warned
	if warn {
		q.warned = true
	}
	q.mu.Unlock()
	if warn {
		q.log.Warn("swim event handler falling behind", "queued", depth)
	}
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// run delivers events until ctx is cancelled; events still queued then are
// dropped, since the node is shutting down and its callers no longer care.
func (q *eventQueue) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.wake:
		}
		q.mu.Lock()
		batch := q.pending
		q.pending = nil
		q.warned = false
		q.mu.Unlock()
		for _, e := range batch {
			if ctx.Err() != nil {
				return
			}
			q.deliver(e)
		}
	}
}

func (q *eventQueue) deliver(e event) {
	var fn func(NodeInfo)
	switch e.kind {
	case eventJoin:
		fn = q.h.OnJoin
	case eventUpdate:
		fn = q.h.OnUpdate
	case eventDead:
		fn = q.h.OnDead
	}
	q.log.Debug("swim member event", "event", e.kind.String(), "node", e.node.Name, "addr", e.node.Addr, "state", e.node.State.String())
	if fn != nil {
		fn(e.node)
	}
}
