package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"tempest/security"
	"tempest/wire"
)

// QUIC application error codes used when closing connections and streams.
const (
	codeNormalClose  quic.ApplicationErrorCode = 0
	codeFrameTooBig  quic.StreamErrorCode      = 1
	codeStreamClosed quic.StreamErrorCode      = 2
)

func numClasses() int { return wire.NumClasses }

// QUIC is the production Transport: one UDP socket serves inbound
// connections and dials outbound ones; each peer gets one connection with a
// few long-lived framed streams that carry many requests each, correlated by
// envelope id.
//
// Lock order: peer.mu before clientStream.mu; QUIC.mu is never held while
// taking either.
type QUIC struct {
	cfg       Config
	log       *slog.Logger
	keys      *security.Keyring
	replay    *security.ReplayGuard
	limiter   *security.RateLimiter
	ids       *wire.SnowflakeGenerator
	stats     counters
	tr        *quic.Transport
	udp       net.PacketConn
	listener  *quic.Listener
	clientTLS *tls.Config
	quicConf  *quic.Config
	addr      string

	handlersMu sync.RWMutex
	handlers   map[wire.MsgType]Handler

	// ctx ends when Close gives up on in-flight work; it bounds every
	// goroutine the transport owns.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine below
	hwg    sync.WaitGroup // running handlers, drained first on Close
	sem    chan struct{}  // MaxInflight tokens

	mu       sync.Mutex
	closing  bool
	peers    map[string]*peer
	inbound  map[*quic.Conn]struct{}
	breakers map[breakerKey]*breaker
}

var _ Transport = (*QUIC)(nil)

// NewQUIC binds the socket, starts accepting connections and returns the
// transport. Close releases everything it started.
func NewQUIC(cfg Config) (*QUIC, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("transport config: %w", err)
	}
	cfg = cfg.withDefaults()
	serverTLS, clientTLS, err := selfSignedTLS(cfg.NodeID)
	if err != nil {
		return nil, err
	}
	udpAddr, err := net.ResolveUDPAddr("udp", cfg.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("resolve listen address %q: %w", cfg.ListenAddr, err)
	}
	udp, err := net.ListenUDP("udp", udpAddr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", cfg.ListenAddr, err)
	}
	qc := &quic.Config{
		HandshakeIdleTimeout: cfg.DialTimeout,
		MaxIdleTimeout:       cfg.IdleTimeout,
		KeepAlivePeriod:      cfg.KeepAlive,
		MaxIncomingStreams:   int64(cfg.StreamsPerPeer) * 64,
		// Frames up to 10 MiB must fit without stalling on window updates.
		MaxStreamReceiveWindow:     16 << 20,
		MaxConnectionReceiveWindow: 64 << 20,
	}
	resetKey, err := cfg.Keyring.StatelessResetKey(cfg.NodeID)
	if err != nil {
		udp.Close()
		return nil, err
	}
	// Stateless resets let a peer of a crashed-and-restarted node drop its
	// dead connection at the restarted node's first answer. Without them a
	// one-way message (an election vote, a report) keeps going into the
	// dead connection until the idle timeout.
	tr := &quic.Transport{Conn: udp, StatelessResetKey: (*quic.StatelessResetKey)(&resetKey)}
	ln, err := tr.Listen(serverTLS, qc)
	if err != nil {
		udp.Close()
		return nil, fmt.Errorf("quic listen %s: %w", cfg.ListenAddr, err)
	}
	replay, err := security.NewReplayGuard(cfg.Replay)
	if err != nil {
		udp.Close()
		return nil, fmt.Errorf("transport replay guard: %w", err)
	}
	limiter, err := security.NewRateLimiter(cfg.RateLimit)
	if err != nil {
		udp.Close()
		return nil, fmt.Errorf("transport rate limiter: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &QUIC{
		cfg:       cfg,
		log:       cfg.Logger.With("node", cfg.NodeID),
		keys:      cfg.Keyring,
		replay:    replay,
		limiter:   limiter,
		ids:       wire.NewSnowflakeGenerator(cfg.NodeID, cfg.Now),
		tr:        tr,
		udp:       udp,
		listener:  ln,
		clientTLS: clientTLS,
		quicConf:  qc,
		addr:      udp.LocalAddr().String(),
		handlers:  make(map[wire.MsgType]Handler),
		ctx:       ctx,
		cancel:    cancel,
		sem:       make(chan struct{}, cfg.MaxInflight),
		peers:     make(map[string]*peer),
		inbound:   make(map[*quic.Conn]struct{}),
		breakers:  make(map[breakerKey]*breaker),
	}
	if cfg.AdvertiseAddr != "" {
		t.addr = cfg.AdvertiseAddr
	}
	t.wg.Add(1)
	go t.acceptLoop()
	return t, nil
}

func (t *QUIC) LocalID() string { return t.cfg.NodeID }
func (t *QUIC) Addr() string    { return t.addr }

// Stats returns a copy of the transport's counters.
func (t *QUIC) Stats() Stats { return t.stats.snapshot() }

func (t *QUIC) Handle(typ wire.MsgType, h Handler) {
	t.handlersMu.Lock()
	defer t.handlersMu.Unlock()
	t.handlers[typ] = h
}

func (t *QUIC) handler(typ wire.MsgType) Handler {
	t.handlersMu.RLock()
	defer t.handlersMu.RUnlock()
	return t.handlers[typ]
}

// Close stops accepting work, lets in-flight handlers finish for up to
// DrainTimeout, then closes every connection and waits for every goroutine.
func (t *QUIC) Close() error {
	t.mu.Lock()
	if t.closing {
		t.mu.Unlock()
		return nil
	}
	t.closing = true
	t.mu.Unlock()

	t.listener.Close()
	drained := make(chan struct{})
	go func() { t.hwg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(t.cfg.DrainTimeout):
		t.log.Warn("closing with handlers still running", "drain_timeout", t.cfg.DrainTimeout)
	}
	t.mu.Lock()
	lingering := len(t.inbound) > 0
	t.mu.Unlock()
	if lingering {
		// Replies just written sit in QUIC send buffers; closing the
		// connection now would discard them. Give them a moment on the wire,
		// as SO_LINGER does for TCP.
		timer := time.NewTimer(t.cfg.Linger)
		<-timer.C
	}
	t.cancel()

	t.mu.Lock()
	peers := t.peers
	t.peers = map[string]*peer{}
	inbound := t.inbound
	t.inbound = map[*quic.Conn]struct{}{}
	t.mu.Unlock()
	for _, p := range peers {
		p.close()
	}
	for c := range inbound {
		c.CloseWithError(codeNormalClose, "node closing")
	}
	t.wg.Wait()
	<-drained
	err := t.tr.Close()
	if uerr := t.udp.Close(); err == nil && uerr != nil && !errors.Is(uerr, net.ErrClosed) {
		err = uerr
	}
	return err
}

// goOwned runs f in a goroutine counted by the transport's WaitGroup, unless
// the transport is closing. Checking and adding under mu is what keeps an Add
// from racing Close's Wait.
func (t *QUIC) goOwned(f func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closing {
		return false
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		f()
	}()
	return true
}

func (t *QUIC) isClosing() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closing
}

// ---- server side ---------------------------------------------------------

func (t *QUIC) acceptLoop() {
	defer t.wg.Done()
	for {
		conn, err := t.listener.Accept(t.ctx)
		if err != nil {
			return // listener closed or transport closing
		}
		t.mu.Lock()
		if t.closing {
			t.mu.Unlock()
			conn.CloseWithError(codeNormalClose, "node closing")
			continue
		}
		t.inbound[conn] = struct{}{}
		t.wg.Add(1)
		t.mu.Unlock()
		go t.serveConn(conn)
	}
}

func (t *QUIC) serveConn(conn *quic.Conn) {
	defer t.wg.Done()
	defer func() {
		// Closing here (a no-op if the peer already did) unblocks this
		// connection's stream readers when the transport shuts down.
		conn.CloseWithError(codeNormalClose, "node closing")
		t.mu.Lock()
		delete(t.inbound, conn)
		t.mu.Unlock()
	}()
	remote := conn.RemoteAddr().String()
	for {
		s, err := conn.AcceptStream(t.ctx)
		if err != nil {
			return
		}
		t.wg.Add(1)
		go t.serveStream(conn, s, remote)
	}
}

// serveStream reads request frames off one stream. Envelope checks run
// inline (they are microseconds); handlers run concurrently, and replies
// share the stream under its write lock.
func (t *QUIC) serveStream(conn *quic.Conn, s *quic.Stream, remote string) {
	defer t.wg.Done()
	w := newStreamWriter(s, t.keys.NewStreamSealer())
	opener := t.keys.NewStreamOpener()
	defer s.Close()
	var buf []byte
	for {
		frame, nb, err := readFrame(s, buf)
		buf = nb
		if err != nil {
			var big errFrameTooLarge
			if errors.As(err, &big) {
				t.stats.tooLarge.Add(1)
				t.log.Warn("oversized frame; resetting stream", "remote", remote, "bytes", big.n)
				// The stream cannot be resynchronised; tell the sender why
				// before resetting it. ReplyTo 0 fails every call on it.
				t.writePlainError(w, 0, &wire.Error{Code: wire.CodeTooLarge, Message: big.Error()})
				s.CancelRead(codeFrameTooBig)
			}
			return
		}
		t.stats.messagesIn.Add(1)
		t.stats.bytesIn.Add(uint64(len(frame) + frameHeaderLen))
		env, msg, perr := t.open(frame, remote, opener)
		if perr != nil {
			if env != nil && env.Flags&wire.FlagOneWay == 0 && perr.reply != nil {
				t.replyError(w, env, perr.reply, perr.plain)
			}
			continue
		}
		if env.Flags&wire.FlagReply != 0 {
			// Replies belong on streams we opened, never on served ones.
			t.stats.malformed.Add(1)
			continue
		}
		select {
		case t.sem <- struct{}{}:
		case <-t.ctx.Done():
			return
		}
		if !t.startHandler() {
			<-t.sem
			if env.Flags&wire.FlagOneWay == 0 {
				t.replyError(w, env, wire.Errorf(wire.CodeUnavailable, "%s is shutting down", t.cfg.NodeID), false)
			}
			continue
		}
		go t.runHandler(w, env, msg, remote)
	}
}

// startHandler counts one more running handler unless Close has begun:
// adding under mu, after checking closing, is what keeps the Add from racing
// Close's drain Wait.
func (t *QUIC) startHandler() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closing {
		return false
	}
	t.hwg.Add(1)
	return true
}

// openError says how to answer an envelope that failed to open: reply is
// the typed error to send back (nil: drop silently), plain says it must go
// unsealed because the sender could not be authenticated.
type openError struct {
	reply *wire.Error
	plain bool
}

// open runs every check an inbound envelope must pass, cheapest first:
// header decode, rate limit, authenticate, replay, body decode. It counts each refusal.
func (t *QUIC) open(frame []byte, remote string, opener *security.StreamOpener) (*wire.Envelope, wire.Message, *openError) {
	env, err := wire.DecodeEnvelope(frame)
	if err != nil {
		t.stats.malformed.Add(1)
		t.log.Debug("malformed envelope", "remote", remote, "err", err)
		return nil, nil, &openError{}
	}
	if ok, retry := t.limiter.Allow(remote, int(env.Type.Class())); !ok {
		t.stats.rateLimited.Add(1)
		return env, nil, &openError{reply: &wire.Error{Code: wire.CodeRateLimited, Message: "rate limit for " + env.Type.Class().String() + " messages", RetryAfter: retry}, plain: true}
	}
	if env.Flags&wire.FlagPlainError != 0 {
		// Unsealed errors are only meaningful as replies to our calls.
		return env, nil, &openError{}
	}
	body, err := opener.Open(env.KeyID, env.Salt, env.Nonce, env.AAD(nil), env.Body, nil)
	if err != nil {
		t.stats.authFailures.Add(1)
		t.log.Debug("envelope failed authentication", "remote", remote, "claimed_sender", env.Sender, "key_id", env.KeyID, "err", err)
		return env, nil, &openError{reply: &wire.Error{Code: wire.CodeUnauthenticated, Message: "envelope did not open with any accepted key (check AUTH_SECRET)"}, plain: true}
	}
	if err := t.replay.Check(env.Sender, env.ID, wire.SnowflakeTime(env.ID)); err != nil {
		t.stats.replaysDropped.Add(1)
		t.log.Debug("replay dropped", "remote", remote, "sender", env.Sender, "id", env.ID, "err", err)
		return env, nil, &openError{} // a replay earns no answer
	}
	msg, err := wire.Decode(env.Type, body)
	if err != nil {
		t.stats.malformed.Add(1)
		return env, nil, &openError{reply: asTyped(err)}
	}
	return env, msg, nil
}

func (t *QUIC) runHandler(w *streamWriter, env *wire.Envelope, msg wire.Message, remote string) {
	defer t.hwg.Done()
	defer func() { <-t.sem }()
	h := t.handler(env.Type)
	if h == nil {
		if env.Flags&wire.FlagOneWay == 0 {
			t.replyError(w, env, wire.Errorf(wire.CodeNoHandler, "%s serves no %s", t.cfg.NodeID, env.Type), false)
		}
		return
	}
	resp, err := h(t.ctx, Peer{NodeID: env.Sender, Addr: remote}, msg)
	if env.Flags&wire.FlagOneWay != 0 {
		if err != nil {
			t.log.Debug("one-way handler failed", "type", env.Type, "sender", env.Sender, "err", err)
		}
		return
	}
	if err != nil {
		t.replyError(w, env, asTyped(err), false)
		return
	}
	if resp == nil {
		t.replyError(w, env, wire.Errorf(wire.CodeInternal, "handler for %s returned no reply", env.Type), false)
		return
	}
	if err := t.writeMessage(w, resp, env.ID, wire.FlagReply); err != nil {
		var typed *wire.Error
		if errors.As(err, &typed) {
			// The reply could not be encoded (over the size cap): the
			// caller hears why now, instead of waiting out its timeout and
			// dropping a healthy connection as silent.
			t.log.Warn("reply not sent", "type", resp.Type(), "to", env.Sender, "err", err)
			t.replyError(w, env, wire.Errorf(typed.Code, "reply %s to %s not sent: %s", resp.Type(), env.Type, typed.Message), false)
			return
		}
		t.log.Debug("reply not sent", "type", resp.Type(), "to", env.Sender, "err", err)
	}
}

func (t *QUIC) replyError(w *streamWriter, req *wire.Envelope, e *wire.Error, plain bool) {
	if plain {
		t.writePlainError(w, req.ID, e)
		return
	}
	if err := t.writeMessage(w, e, req.ID, wire.FlagReply); err != nil {
		t.log.Debug("error reply not sent", "to", req.Sender, "err", err)
	}
}

// writePlainError sends an unsealed error. It carries nothing secret, and
// the caller trusts it only as a failure, never as data.
func (t *QUIC) writePlainError(w *streamWriter, replyTo uint64, e *wire.Error) {
	body, err := wire.Marshal(e)
	if err != nil {
		return
	}
	env := &wire.Envelope{
		Version: wire.ProtocolVersion,
		Sender:  t.cfg.NodeID,
		Type:    wire.TypeError,
		ID:      t.ids.Next(),
		ReplyTo: replyTo,
		Flags:   wire.FlagReply | wire.FlagPlainError,
		Body:    body,
	}
	b, err := wire.EncodeEnvelope(env)
	if err != nil {
		return
	}
	if err := w.write(appendFrame(nil, b)); err == nil {
		t.stats.messagesOut.Add(1)
	}
}

// seal builds the sealed frame for msg with a stream's sealer.
func (t *QUIC) seal(sealer *security.StreamSealer, msg wire.Message, replyTo uint64, flags wire.Flags) (id uint64, frame []byte, err error) {
	body, err := wire.Marshal(msg)
	if err != nil {
		return 0, nil, err
	}
	if len(body) > maxBodyLen {
		return 0, nil, &wire.Error{Code: wire.CodeTooLarge, Message: fmt.Sprintf("%s body of %d bytes exceeds %d", msg.Type(), len(body), maxBodyLen)}
	}
	env := &wire.Envelope{
		Version: wire.ProtocolVersion,
		Sender:  t.cfg.NodeID,
		Type:    msg.Type(),
		ID:      t.ids.Next(),
		ReplyTo: replyTo,
		Flags:   flags,
	}
	sealed, err := sealer.Seal(nil, env.AAD(nil), body)
	if err != nil {
		return 0, nil, fmt.Errorf("seal %s: %w", msg.Type(), err)
	}
	env.KeyID, env.Salt, env.Nonce, env.Body = sealed.KeyID, sealed.Salt, sealed.Nonce, sealed.Ciphertext
	b, err := wire.EncodeEnvelope(env)
	if err != nil {
		return 0, nil, err
	}
	return env.ID, appendFrame(make([]byte, 0, len(b)+frameHeaderLen), b), nil
}

func (t *QUIC) writeMessage(w *streamWriter, msg wire.Message, replyTo uint64, flags wire.Flags) error {
	_, frame, err := t.seal(w.sealer, msg, replyTo, flags)
	if err != nil {
		return err
	}
	if err := w.write(frame); err != nil {
		return err
	}
	t.stats.messagesOut.Add(1)
	t.stats.bytesOut.Add(uint64(len(frame)))
	return nil
}

// streamWriter serialises whole frames onto a stream shared by many
// goroutines, and owns the stream's sealer. Writers combine: whoever finds
// the stream idle writes every frame queued meanwhile, a batch per Write, so
// concurrent callers share one pass through quic-go's send path instead of
// queueing for it one frame at a time.
type streamWriter struct {
	s      *quic.Stream
	sealer *security.StreamSealer

	mu      sync.Mutex
	pending *writeBatch // frames waiting for the current write to finish
	writing bool
}

type writeBatch struct {
	buf  []byte
	done chan struct{}
	err  error
}

func newStreamWriter(s *quic.Stream, sealer *security.StreamSealer) *streamWriter {
	return &streamWriter{s: s, sealer: sealer}
}

// write returns once frame has been handed to QUIC (or failed to be).
func (w *streamWriter) write(frame []byte) error {
	w.mu.Lock()
	if !w.writing && w.pending == nil {
		// Idle stream: write our frame as it is, no copy, then lead any
		// batch that formed behind it.
		w.writing = true
		w.mu.Unlock()
		_, err := w.s.Write(frame)
		w.mu.Lock()
		w.drain()
		w.mu.Unlock()
		return err
	}
	if w.pending == nil {
		w.pending = &writeBatch{done: make(chan struct{})}
	}
	b := w.pending
	b.buf = append(b.buf, frame...)
	if w.writing {
		w.mu.Unlock()
		<-b.done
		return b.err
	}
	// Lead: write batches until none is waiting. Under sustained load the
	// leader may write others' frames for a while; they are all on one
	// stream, so someone has to, and it costs the leader only latency.
	w.writing = true
	w.drain()
	w.mu.Unlock()
	return b.err
}

// drain writes queued batches until none is left, then gives up the lead.
// Called with mu held and writing set; returns with mu held.
func (w *streamWriter) drain() {
	for w.pending != nil {
		batch := w.pending
		w.pending = nil
		w.mu.Unlock()
		_, batch.err = w.s.Write(batch.buf)
		close(batch.done)
		w.mu.Lock()
	}
	w.writing = false
}

// asTyped passes a *wire.Error through and turns anything else into a
// CodeInternal error carrying only the message text (never a stack).
func asTyped(err error) *wire.Error {
	var we *wire.Error
	if errors.As(err, &we) {
		return we
	}
	msg := err.Error()
	if len(msg) > 512 {
		msg = msg[:512]
	}
	return &wire.Error{Code: wire.CodeInternal, Message: msg}
}
