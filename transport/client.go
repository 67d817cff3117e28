package transport

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/sony/gobreaker/v2"

	"tempest/security"
	"tempest/wire"
)

// Errors a caller may branch on.
var (
	// ErrCircuitOpen: the breaker for this peer and class is open; the call
	// failed fast without touching the network.
	ErrCircuitOpen = errors.New("circuit open")
	// ErrNotDelivered: the request certainly never reached the peer's
	// handler (dial or stream open failed), so it is always safe to retry.
	ErrNotDelivered = errors.New("not delivered")
	// ErrConnLost: the connection failed while the call was in flight; the
	// peer may or may not have run it.
	ErrConnLost = errors.New("connection lost")
)

// Call implements Transport.
//
// A ctx without a deadline gets CallTimeout, kept as a plain deadline rather
// than a derived context: a derived context costs a timer and a cancel per
// call, about 2% of a round trip on loopback. The write puts the deadline
// on the stream, and a reply that does not come in time is failed by the
// transport's expiry sweep (expireCalls), which is coarser than a timer by
// at most CallTimeout/20.
func (t *QUIC) Call(ctx context.Context, addr string, req wire.Message, opts ...CallOption) (wire.Message, error) {
	o := applyCallOptions(opts)
	deadline := t.deadlineOf(ctx)
	p, err := t.peer(addr)
	if err != nil {
		t.stats.callErrors.Add(1)
		return nil, err
	}
	cb := t.breaker(p, req.Type().Class())
	for attempt := 0; ; attempt++ {
		resp, err := cb.cb.Execute(func() (wire.Message, error) { return t.roundTrip(ctx, deadline, p, req) })
		if err == nil {
			return resp, nil
		}
		if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
			err = fmt.Errorf("call %s to %s: %w", req.Type(), addr, ErrCircuitOpen)
		}
		wait, retry := t.retryable(err, o, attempt)
		if !retry {
			t.stats.callErrors.Add(1)
			return nil, err
		}
		if wait >= time.Until(deadline) {
			// The next attempt would start at or past the deadline, and a
			// write that gives up at its deadline drops the connection.
			t.stats.callErrors.Add(1)
			return nil, fmt.Errorf("call %s to %s: %w (last error: %v)", req.Type(), addr, context.DeadlineExceeded, err)
		}
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			t.stats.callErrors.Add(1)
			return nil, fmt.Errorf("call %s to %s: %w (last error: %v)", req.Type(), addr, ctx.Err(), err)
		case <-t.ctx.Done():
			timer.Stop()
			return nil, ErrClosed
		}
	}
}

// deadlineOf is when a call or send on ctx gives up: ctx's deadline, or
// CallTimeout from now when ctx has none.
func (t *QUIC) deadlineOf(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(t.cfg.CallTimeout)
}

// retryable decides whether to try again and how long to wait first.
func (t *QUIC) retryable(err error, o callOptions, attempt int) (time.Duration, bool) {
	if attempt >= o.retries || errors.Is(err, ErrCircuitOpen) || errors.Is(err, ErrClosed) {
		return 0, false
	}
	wait := t.backoff(attempt)
	var we *wire.Error
	switch {
	case errors.As(err, &we):
		if we.Code != wire.CodeRateLimited && we.Code != wire.CodeUnavailable {
			return 0, false // the peer answered; repeating will not change its mind
		}
		if we.RetryAfter > wait {
			wait = we.RetryAfter
		}
		return wait, true
	case errors.Is(err, ErrNotDelivered):
		return wait, true
	case o.idempotent && (errors.Is(err, ErrConnLost) || errors.Is(err, context.DeadlineExceeded)):
		return wait, true
	}
	return 0, false
}

// backoff is "full jitter": uniform in [0, min(Max, Base*2^attempt)), which
// spreads a herd of retrying callers better than a fixed delay.
func (t *QUIC) backoff(attempt int) time.Duration {
	ceil := t.cfg.Backoff.Base << min(attempt, 30)
	if ceil <= 0 || ceil > t.cfg.Backoff.Max {
		ceil = t.cfg.Backoff.Max
	}
	return time.Duration(rand.Int64N(int64(ceil)) + 1)
}

// Send implements Transport.
func (t *QUIC) Send(ctx context.Context, addr string, msg wire.Message) error {
	deadline := t.deadlineOf(ctx)
	p, err := t.peer(addr)
	if err != nil {
		return err
	}
	cb := t.breaker(p, msg.Type().Class())
	_, err = cb.cb.Execute(func() (wire.Message, error) {
		s, err := t.stream(ctx, deadline, p)
		if err != nil {
			return nil, err
		}
		_, sb, err := t.seal(s.w, msg, 0, wire.FlagOneWay)
		if err != nil {
			return nil, err
		}
		defer t.putBuf(sb)
		if err := s.writeBy(ctx, deadline, sb.frame); err != nil {
			return nil, fmt.Errorf("send %s to %s: %w", msg.Type(), addr, err)
		}
		s.w.io.out(len(sb.frame))
		return nil, nil
	})
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		err = fmt.Errorf("send %s to %s: %w", msg.Type(), addr, ErrCircuitOpen)
	}
	return err
}

// roundTrip sends one request on a pooled stream and waits for its reply
// until ctx ends or, when ctx has no deadline, until the expiry sweep fails
// it after deadline.
func (t *QUIC) roundTrip(ctx context.Context, deadline time.Time, p *peer, req wire.Message) (wire.Message, error) {
	addr := p.addr
	s, err := t.stream(ctx, deadline, p)
	if err != nil {
		return nil, err
	}
	id, sb, err := t.seal(s.w, req, 0, 0)
	if err != nil {
		return nil, err
	}
	ch, _ := t.replies.Get().(chan result)
	if ch == nil {
		ch = make(chan result, 1)
	}
	var expires int64
	if _, bounded := ctx.Deadline(); !bounded {
		expires = deadline.UnixNano()
	}
	if err := s.register(id, ch, expires); err != nil {
		t.putBuf(sb)
		return nil, fmt.Errorf("call %s to %s: %w", req.Type(), addr, err)
	}
	heard := s.recvd.Load()
	err = s.writeBy(ctx, deadline, sb.frame)
	n := len(sb.frame)
	t.putBuf(sb)
	if err != nil {
		// A caller that only left the queue gets its ctx error: the request
		// still goes out, and a late reply finds no one registered.
		s.unregister(id)
		return nil, fmt.Errorf("call %s to %s: %w", req.Type(), addr, err)
	}
	s.w.io.out(n)
	var r result
	select {
	case r = <-ch:
		// A registration is answered once (by deliver, fail or the
		// sweep), and this was it: ch is empty and nobody holds it. On
		// the other path a late answer may still land in ch, so it is left
		// to the collector.
		t.replies.Put(ch)
		if !errors.Is(r.err, errExpired) {
			return r.msg, r.err
		}
	case <-ctx.Done():
		s.unregister(id)
	}
	err = ctx.Err()
	if err == nil {
		err = context.DeadlineExceeded // swept
	}
	if errors.Is(err, context.DeadlineExceeded) && s.silentSince(heard) {
		// Nothing at all came back on this stream while we waited: the
		// peer is likely gone (a crashed process leaves QUIC waiting for
		// its idle timeout). Drop the stream and its connection so the
		// next attempt redials instead of queueing behind a corpse.
		s.owner.dropConn(s)
	}
	return nil, fmt.Errorf("call %s to %s: %w", req.Type(), addr, err)
}

// errDialPending marks a call whose own time ran out while the peer's
// dial was still under way. The dial goes on without it and reports its
// own outcome to the callers waiting when it ends, so a caller with a short
// deadline (an election message lives two ticks) giving up first says
// nothing about the peer: on a starved host a dial to a live peer can take
// longer than such a message lives.
var errDialPending = errors.New("dial still under way")

// errExpired is what the expiry sweep answers a call past its deadline
// with; roundTrip turns it into context.DeadlineExceeded.
var errExpired = errors.New("call deadline passed")

// expireCalls fails, every tick, the calls whose deadline the sweep keeps
// (those whose ctx has none) once it has passed.
func (t *QUIC) expireCalls(tick time.Duration) {
	tk := time.NewTicker(tick)
	defer tk.Stop()
	for {
		select {
		case <-t.ctx.Done():
			return
		case now := <-tk.C:
			t.mu.Lock()
			peers := make([]*peer, 0, len(t.peers))
			for _, p := range t.peers {
				peers = append(peers, p)
			}
			t.mu.Unlock()
			for _, p := range peers {
				p.mu.Lock()
				streams := slices.Clone(p.streams)
				p.mu.Unlock()
				for _, s := range streams {
					if s != nil {
						s.expire(now.UnixNano())
					}
				}
			}
		}
	}
}

// ---- breakers ------------------------------------------------------------

type breaker struct {
	cb *gobreaker.CircuitBreaker[wire.Message]
}

// breaker returns p's breaker for class, made on first use. Calls find it
// on their peer without a lock: a lookup under the transport's lock in a
// map keyed by address was a lock every call of every peer queued on.
func (t *QUIC) breaker(p *peer, class wire.Class) *breaker {
	slot := &p.breakers[class]
	if b := slot.Load(); b != nil {
		return b
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if b := slot.Load(); b != nil {
		return b
	}
	addr := p.addr
	k := breakerKey{peer: addr, class: class}
	threshold := t.cfg.Breaker.ConsecutiveFailures
	b := &breaker{cb: gobreaker.NewCircuitBreaker[wire.Message](gobreaker.Settings{
		Name:        addr + "/" + class.String(),
		MaxRequests: 1,
		Timeout:     t.cfg.Breaker.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= threshold },
		// A typed reply means the peer is alive and answering: not a
		// failure of the path, whatever it says.
		IsSuccessful: func(err error) bool {
			var we *wire.Error
			return err == nil || errors.As(err, &we)
		},
		// The caller giving up says nothing about the peer, and neither
		// does a caller whose deadline passed while the dial was still
		// under way: the dial's own failure is counted by the callers it
		// fails.
		IsExcluded: func(err error) bool {
			return errors.Is(err, context.Canceled) || errors.Is(err, ErrClosed) || errors.Is(err, errDialPending)
		},
		OnStateChange: func(name string, from, to gobreaker.State) {
			t.stats.breaker.Add(1)
			t.stats.setBreaker(k, to.String())
			t.log.Info("circuit breaker state change", "breaker", name, "from", from.String(), "to", to.String())
		},
	})}
	slot.Store(b)
	return b
}

// ---- outbound connections and streams --------------------------------------

type result struct {
	msg wire.Message
	err error
}

// peer is our outbound side to one address: one QUIC connection and a small
// pool of long-lived streams.
type peer struct {
	addr string
	// breakers are this peer's, one per message class.
	breakers [wire.NumClasses]atomic.Pointer[breaker]

	mu   sync.Mutex
	conn *quic.Conn
	// remoteID and channel are what the connection's hello proved: the
	// peer's node id and the channel binding.
	remoteID string
	tier     security.Tier
	channel  []byte
	streams  []*clientStream
	dialing  chan struct{} // closed when the dial in progress ends
	dialErr  error         // outcome of the last dial
	next     atomic.Uint32
}

// writeBy writes frame, giving up when ctx ends: a write blocks once the
// peer's flow-control window is full, and a peer that crashed never opens
// it again, so without a deadline a send would wait for QUIC's idle timeout
// whatever its own. It is the one place a failed write is judged:
//   - a caller that gave up while queued behind another write gets ctx's
//     error, and the stream carries on (its frame still goes out whole);
//   - a write that gave up at its deadline may have left part of a frame on
//     the stream, and a peer that stopped reading is likely gone: the
//     connection is dropped, failing what was queued behind it too, and the
//     next call redials;
//   - any failed write fails the stream's waiting calls (ErrConnLost).
func (s *clientStream) writeBy(ctx context.Context, deadline time.Time, frame []byte) error {
	err := s.w.write(ctx, deadline, frame)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errLeftInQueue):
		return ctx.Err()
	case ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) || !time.Now().Before(deadline):
		// The stream's deadline can pass a moment before ctx's own timer
		// fires, and a deadline ctx does not carry (CallTimeout) has only
		// the clock to say it has passed.
		s.owner.dropConn(s)
		err = fmt.Errorf("%w (write gave up at its deadline)", err)
	}
	s.fail(err)
	return fmt.Errorf("%w: %v", ErrConnLost, err)
}

// dropConn closes the connection s belongs to, if it is still current.
func (p *peer) dropConn(s *clientStream) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, cs := range p.streams {
		if cs == s {
			if p.conn != nil {
				p.conn.CloseWithError(codeNormalClose, "peer silent")
			}
			p.conn = nil
			p.streams = nil
			return
		}
	}
}

func (p *peer) close(reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil {
		p.conn.CloseWithError(codeNormalClose, reason)
		p.conn = nil
	}
	p.streams = nil
}

// Disconnect closes the outbound connection to addr, if there is one, so
// that the next call dials afresh. A caller that learns the peer died (SWIM
// declared it dead) says so here: a process restarted on the same address
// knows nothing of the old connection, and the first call on it would be
// lost to a stateless reset, its outcome unknown to the caller. Calls in
// flight on the connection fail with ErrConnLost.
func (t *QUIC) Disconnect(addr string) {
	t.mu.Lock()
	p := t.peers[addr]
	t.mu.Unlock()
	if p != nil {
		p.close("peer declared dead")
	}
}

// clientStream is one long-lived stream with its pending calls.
type clientStream struct {
	w      *streamWriter
	opener *security.StreamOpener
	owner  *peer
	// recvd counts the frames read: a caller notes it before sending and
	// compares after, which costs no clock reads.
	recvd atomic.Uint64

	mu      sync.Mutex
	pending map[uint64]pendingCall
	err     error // set once the stream is dead
}

// pendingCall is a call waiting for its reply: where to send it and, for a
// call the expiry sweep bounds, its deadline in unix nanoseconds (zero: the
// caller's ctx bounds it).
type pendingCall struct {
	ch      chan result
	expires int64
}

func (s *clientStream) register(id uint64, ch chan result, expires int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return fmt.Errorf("%w: %v", ErrNotDelivered, s.err)
	}
	s.pending[id] = pendingCall{ch: ch, expires: expires}
	return nil
}

// expire fails the swept calls whose deadline is before now.
func (s *clientStream) expire(now int64) {
	var due []chan result
	s.mu.Lock()
	for id, c := range s.pending {
		if c.expires != 0 && c.expires < now {
			delete(s.pending, id)
			due = append(due, c.ch)
		}
	}
	s.mu.Unlock()
	for _, ch := range due {
		ch <- result{err: errExpired}
	}
}

func (s *clientStream) unregister(id uint64) {
	s.mu.Lock()
	delete(s.pending, id)
	s.mu.Unlock()
}

// silentSince reports whether no frame has arrived since recvd read heard.
func (s *clientStream) silentSince(heard uint64) bool {
	return s.recvd.Load() == heard
}

func (s *clientStream) dead() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err != nil
}

// deliver hands a reply to its waiting caller; a reply nobody waits for
// (the caller timed out) is dropped.
func (s *clientStream) deliver(id uint64, r result) {
	s.mu.Lock()
	c, ok := s.pending[id]
	delete(s.pending, id)
	s.mu.Unlock()
	if ok {
		c.ch <- r
	}
}

// fail marks the stream dead and fails every pending call with err.
func (s *clientStream) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	pending := s.pending
	s.pending = map[uint64]pendingCall{}
	s.mu.Unlock()
	s.w.s.CancelRead(codeStreamClosed)
	s.w.s.Close()
	for _, c := range pending {
		c.ch <- result{err: err}
	}
}

// stream returns a live stream to addr, dialing and opening as needed.
//
// Dials run in the background, owned by the transport and bounded by
// DialTimeout rather than by the caller's context: a caller with a short
// deadline (an election message lives for one heartbeat) may give up
// waiting, but the handshake carries on, so the next message finds the
// connection ready instead of starting a handshake that can never finish
// in time on a lossy network.
//
// A caller waiting for a dial also gives up at deadline, which its ctx may
// not carry (Call and Send keep CallTimeout as a plain deadline); only this
// wait, not every call, pays for a timer then.
func (t *QUIC) stream(ctx context.Context, deadline time.Time, p *peer) (*clientStream, error) {
	addr := p.addr
	var expired <-chan time.Time
	for {
		p.mu.Lock()
		if p.conn != nil && p.conn.Context().Err() == nil && p.streams != nil {
			s, err := t.pickStream(ctx, deadline, p)
			p.mu.Unlock()
			return s, err
		}
		if p.dialing == nil {
			done := make(chan struct{})
			if !t.goOwned(func() { t.dialPeer(p, done) }) {
				p.mu.Unlock()
				return nil, ErrClosed
			}
			p.dialing = done
		}
		dialing := p.dialing
		p.mu.Unlock()
		if expired == nil {
			if _, ok := ctx.Deadline(); !ok {
				timer := time.NewTimer(time.Until(deadline))
				defer timer.Stop()
				expired = timer.C
			}
		}
		select {
		case <-dialing:
			p.mu.Lock()
			err := p.dialErr
			p.mu.Unlock()
			if err != nil {
				return nil, err
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("dial %s: %w: %w: %v", addr, ErrNotDelivered, errDialPending, ctx.Err())
		case <-expired:
			return nil, fmt.Errorf("dial %s: %w: %w: %v", addr, ErrNotDelivered, errDialPending, context.DeadlineExceeded)
		}
	}
}

// peer returns our outbound side to addr, made on first use.
func (t *QUIC) peer(addr string) (*peer, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closing {
		return nil, ErrClosed
	}
	p, ok := t.peers[addr]
	if !ok {
		p = &peer{addr: addr}
		t.peers[addr] = p
	}
	return p, nil
}

// dialPeer connects p in the background and publishes the outcome.
func (t *QUIC) dialPeer(p *peer, done chan struct{}) {
	conn, remoteID, tier, channel, err := t.dial(t.ctx, p.addr)
	if err == nil && t.isClosing() {
		conn.CloseWithError(codeNormalClose, "node closing")
		conn, err = nil, ErrClosed
	}
	p.mu.Lock()
	p.dialing, p.dialErr = nil, err
	if err == nil {
		p.conn, p.remoteID, p.tier, p.channel = conn, remoteID, tier, channel
		p.streams = make([]*clientStream, t.cfg.StreamsPerPeer)
	}
	p.mu.Unlock()
	close(done)
}

// pickStream returns the next pooled stream of p's connection, opening it
// if needed. Caller holds p.mu.
func (t *QUIC) pickStream(ctx context.Context, deadline time.Time, p *peer) (*clientStream, error) {
	i := int(p.next.Add(1)) % len(p.streams)
	if s := p.streams[i]; s != nil && !s.dead() {
		return s, nil
	}
	if _, ok := ctx.Deadline(); !ok {
		// Opening waits while the peer's stream limit is reached; rare
		// enough for a context of its own.
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	qs, err := p.conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, fmt.Errorf("open stream to %s: %w: %v", p.addr, ErrNotDelivered, err)
	}
	s := &clientStream{
		w:       newStreamWriter(qs, t.stats.ioShard(), t.keys.NewStreamSealer(p.tier), p.remoteID, p.channel),
		opener:  t.keys.NewStreamOpener(p.tier),
		owner:   p,
		pending: make(map[uint64]pendingCall),
	}
	if !t.goOwned(func() { t.readReplies(p.addr, s) }) {
		qs.CancelRead(codeStreamClosed)
		qs.Close()
		return nil, ErrClosed
	}
	p.streams[i] = s
	return s, nil
}

// dial connects to addr and runs the hello, returning the connection, the
// peer's proven node id and the channel binding.
func (t *QUIC) dial(ctx context.Context, addr string) (*quic.Conn, string, security.Tier, []byte, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, "", 0, nil, fmt.Errorf("resolve %s: %w: %v", addr, ErrNotDelivered, err)
	}
	dctx, cancel := context.WithTimeout(ctx, t.cfg.DialTimeout)
	defer cancel()
	conn, err := t.tr.Dial(dctx, ua, t.clientTLS, t.quicConf)
	if err != nil {
		return nil, "", 0, nil, fmt.Errorf("dial %s: %w: %v", addr, ErrNotDelivered, err)
	}
	remoteID, tier, channel, err := t.dialHello(dctx, conn, addr)
	if err != nil {
		conn.CloseWithError(codeNormalClose, "hello failed")
		return nil, "", 0, nil, err
	}
	t.authed.Store(conn, struct{}{})
	context.AfterFunc(conn.Context(), func() { t.authed.Delete(conn) })
	return conn, remoteID, tier, channel, nil
}

// readReplies demultiplexes replies on one outbound stream to their callers.
func (t *QUIC) readReplies(addr string, s *clientStream) {
	var (
		buf []byte
		aad []byte // scratch for each reply's additional data
		env wire.Envelope
	)
	for {
		frame, nb, err := readFrame(s.w.s, buf, maxFrameLen)
		buf = nb
		if err != nil {
			s.fail(fmt.Errorf("stream to %s: %w: %v", addr, ErrConnLost, err))
			return
		}
		s.recvd.Add(1)
		s.w.io.in(len(frame))
		if err := wire.DecodeEnvelopeInto(&env, frame); err != nil {
			t.stats.malformed.Add(1)
			continue
		}
		if env.Flags&wire.FlagPlainError != 0 {
			var e wire.Error
			if uerr := wire.Unmarshal(env.Body, &e); uerr != nil {
				t.stats.malformed.Add(1)
				continue
			}
			if env.ReplyTo == 0 {
				// The peer reset the whole stream (e.g. an oversized frame).
				s.fail(&e)
				return
			}
			s.deliver(env.ReplyTo, result{err: &e})
			continue
		}
		if env.Sender != s.w.recipient {
			t.stats.authFailures.Add(1)
			s.deliver(env.ReplyTo, result{err: &wire.Error{Code: wire.CodeUnauthenticated, Message: "reply from " + addr + " names another sender than the connection's hello"}})
			continue
		}
		// Opened in place: the plaintext overwrites the ciphertext in buf,
		// and Decode copies what it keeps.
		aad = env.BoundAAD(aad[:0], t.cfg.NodeID, s.w.channel)
		body, err := s.opener.Open(env.KeyID, env.Salt, env.Nonce, aad, env.Body, env.Body[:0])
		if err != nil {
			t.stats.authFailures.Add(1)
			s.deliver(env.ReplyTo, result{err: &wire.Error{Code: wire.CodeUnauthenticated, Message: "reply from " + addr + " did not open with any accepted key"}})
			continue
		}
		// No replay guard here: a reply is taken at most once by
		// construction. It goes only to the pending call its ReplyTo names
		// (sealed into the additional data), a call is answered once, and
		// ids are never reused, so a repeated reply finds no one waiting.
		// The guard's map insert was about 1.5% of a round trip.
		msg, err := wire.Decode(env.Type, body)
		if err != nil {
			t.stats.malformed.Add(1)
			s.deliver(env.ReplyTo, result{err: wire.AsError(err)})
			continue
		}
		if e, ok := msg.(*wire.Error); ok {
			s.deliver(env.ReplyTo, result{err: e})
			continue
		}
		s.deliver(env.ReplyTo, result{msg: msg})
	}
}
