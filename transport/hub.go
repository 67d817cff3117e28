package transport

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"tempest/wire"
)

// ErrUnreachable is returned by the in-memory hub when the destination is
// unknown, closed, partitioned away, or the message was dropped on a call.
var ErrUnreachable = errors.New("peer unreachable")

// ErrClosed is returned by a transport that has been closed.
var ErrClosed = errors.New("transport closed")

// Hub is an in-memory network for unit tests of the roles and leadership:
// every node's Transport delivers through it, and the test can partition,
// heal, isolate and drop. Messages are encoded and decoded with the real
// codec on the way, so a type that does not survive the wire fails here too.
type Hub struct {
	mu       sync.Mutex
	nodes    map[string]*memTransport
	group    map[string]int // node -> partition group; absent = group 0
	lonely   int            // next group number for Isolate, counting down
	dropRate float64
	rng      *rand.Rand
	hook     func(from, to string, msg wire.Message) bool
}

// HubOption configures a Hub.
type HubOption func(*Hub)

// WithSeed makes the hub's drop decisions reproducible.
func WithSeed(seed uint64) HubOption {
	return func(h *Hub) { h.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }
}

// NewHub creates an empty in-memory network.
func NewHub(opts ...HubOption) *Hub {
	h := &Hub{
		nodes: make(map[string]*memTransport),
		group: make(map[string]int),
		rng:   rand.New(rand.NewPCG(1, 2)),
	}
	for _, o := range opts {
		o(h)
	}
	return h
}

// Node returns the transport of node id, creating it on first use. Its
// Addr is id itself.
func (h *Hub) Node(id string) Transport {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n, ok := h.nodes[id]; ok && !n.isClosed() {
		return n
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &memTransport{hub: h, id: id, handlers: make(map[wire.MsgType]Handler), ctx: ctx, cancel: cancel}
	h.nodes[id] = n
	return n
}

// Partition splits the network: nodes in different groups cannot reach each
// other. Nodes named in no group form one more group together.
func (h *Hub) Partition(groups ...[]string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.group = make(map[string]int)
	for i, g := range groups {
		for _, id := range g {
			h.group[id] = i + 1
		}
	}
}

// Isolate cuts one node off from everyone else, keeping other partitions.
func (h *Hub) Isolate(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lonely--
	h.group[id] = h.lonely // a group nobody else has
}

// Heal removes every partition.
func (h *Hub) Heal() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.group = make(map[string]int)
}

// SetDropRate drops each message (one-way or request) with probability p.
func (h *Hub) SetDropRate(p float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dropRate = p
}

// SetHook installs f to see every message before delivery; returning false
// drops it. nil removes the hook.
func (h *Hub) SetHook(f func(from, to string, msg wire.Message) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hook = f
}

// route decides whether from can reach to now and returns the destination.
func (h *Hub) route(from, to string, msg wire.Message) (*memTransport, error) {
	h.mu.Lock()
	dst, ok := h.nodes[to]
	reachable := ok && h.group[from] == h.group[to]
	drop := h.dropRate > 0 && h.rng.Float64() < h.dropRate
	hook := h.hook
	h.mu.Unlock()
	if !ok || dst.isClosed() {
		return nil, fmt.Errorf("%s -> %s: no such node: %w", from, to, ErrUnreachable)
	}
	if !reachable {
		return nil, fmt.Errorf("%s -> %s: partitioned: %w", from, to, ErrUnreachable)
	}
	if drop || (hook != nil && !hook(from, to, msg)) {
		return nil, fmt.Errorf("%s -> %s: dropped: %w", from, to, ErrUnreachable)
	}
	return dst, nil
}

// copyMessage runs msg through the real codec, so sender and receiver never
// share memory and every type is checked for wire-compatibility.
func copyMessage(msg wire.Message) (wire.Message, error) {
	b, err := wire.Marshal(msg)
	if err != nil {
		return nil, err
	}
	return wire.Decode(msg.Type(), b)
}

type memTransport struct {
	hub *Hub
	id  string

	mu       sync.RWMutex
	handlers map[wire.MsgType]Handler
	closed   bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (n *memTransport) LocalID() string { return n.id }
func (n *memTransport) Addr() string    { return n.id }

func (n *memTransport) Handle(t wire.MsgType, h Handler) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.handlers[t] = h
}

func (n *memTransport) isClosed() bool {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.closed
}

// serve runs the destination's handler in a goroutine the destination owns,
// so closing a node waits for its in-flight handlers.
func (n *memTransport) serve(from string, msg wire.Message, reply func(wire.Message, error)) error {
	n.mu.RLock()
	if n.closed {
		n.mu.RUnlock()
		return fmt.Errorf("%s: %w", n.id, ErrUnreachable)
	}
	h := n.handlers[msg.Type()]
	n.wg.Add(1)
	n.mu.RUnlock()
	go func() {
		defer n.wg.Done()
		if h == nil {
			reply(nil, wire.Errorf(wire.CodeNoHandler, "%s serves no %s", n.id, msg.Type()))
			return
		}
		resp, err := h(n.ctx, Peer{NodeID: from, Addr: from}, msg)
		reply(resp, err)
	}()
	return nil
}

func (n *memTransport) Call(ctx context.Context, addr string, req wire.Message, opts ...CallOption) (wire.Message, error) {
	if n.isClosed() {
		return nil, ErrClosed
	}
	dst, err := n.hub.route(n.id, addr, req)
	if err != nil {
		return nil, fmt.Errorf("call %s: %w", req.Type(), err)
	}
	in, err := copyMessage(req)
	if err != nil {
		return nil, fmt.Errorf("call %s: %w", req.Type(), err)
	}
	type result struct {
		msg wire.Message
		err error
	}
	done := make(chan result, 1)
	err = dst.serve(n.id, in, func(resp wire.Message, herr error) {
		if herr != nil {
			done <- result{err: wire.AsError(herr)}
			return
		}
		if resp == nil {
			done <- result{err: wire.Errorf(wire.CodeInternal, "handler for %s returned no reply", req.Type())}
			return
		}
		out, cerr := copyMessage(resp)
		done <- result{msg: out, err: cerr}
	})
	if err != nil {
		return nil, fmt.Errorf("call %s: %w", req.Type(), err)
	}
	select {
	case r := <-done:
		return r.msg, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("call %s to %s: %w", req.Type(), addr, ctx.Err())
	case <-n.ctx.Done():
		return nil, ErrClosed
	}
}

func (n *memTransport) Send(ctx context.Context, addr string, msg wire.Message) error {
	if n.isClosed() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	dst, err := n.hub.route(n.id, addr, msg)
	if err != nil {
		// A one-way message lost in the network is not the sender's error to
		// see, just as on a real network; only unknown/closed nodes report.
		if errors.Is(err, ErrUnreachable) {
			return nil
		}
		return err
	}
	in, err := copyMessage(msg)
	if err != nil {
		return fmt.Errorf("send %s: %w", msg.Type(), err)
	}
	_ = dst.serve(n.id, in, func(wire.Message, error) {})
	return nil
}

func (n *memTransport) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	n.mu.Unlock()
	n.cancel()
	n.wg.Wait()
	return nil
}
