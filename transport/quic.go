package transport

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
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
	codeReplyStalled quic.StreamErrorCode      = 3
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
	admission *admission
	ids       *wire.SnowflakeGenerator
	stats     counters
	// bufs holds *sealBuf scratch for sealing outbound messages; replies
	// holds empty chan result for calls waiting on their reply.
	bufs      sync.Pool
	replies   sync.Pool
	tr        *quic.Transport
	udp       net.PacketConn
	listener  *quic.Listener
	clientTLS *tls.Config
	quicConf  *quic.Config
	addr      string

	// authed holds every connection (inbound or outbound) whose hello has
	// verified; only those may grow their flow-control windows.
	authed sync.Map // *quic.Conn -> struct{}

	handlersMu sync.RWMutex
	handlers   map[wire.MsgType]Handler

	// ctx ends when Close gives up on in-flight work; it bounds every
	// goroutine the transport owns.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine below
	hwg    sync.WaitGroup // running handlers, drained first on Close
	sem    chan struct{}  // MaxInflight tokens
	// jobs hands a request to a handler goroutine parked between requests
	// (handlerLoop); idle counts the parked ones.
	jobs chan handlerJob
	idle atomic.Int32

	mu      sync.Mutex
	closing bool
	peers   map[string]*peer
	inbound map[*quic.Conn]struct{}
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
	adm, err := newAdmission(cfg.Limits, cfg.Now)
	if err != nil {
		udp.Close()
		return nil, err
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
	resetKey, err := cfg.Keyring.StatelessResetKey(cfg.NodeID)
	if err != nil {
		udp.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	// t is complete, but for the listener, before quic-go can call the
	// admission and flow-control callbacks below.
	t := &QUIC{
		cfg:       cfg,
		log:       cfg.Logger.With("node", cfg.NodeID),
		keys:      cfg.Keyring,
		replay:    replay,
		limiter:   limiter,
		admission: adm,
		ids:       wire.NewSnowflakeGenerator(cfg.NodeID, cfg.Now),
		udp:       udp,
		clientTLS: clientTLS,
		addr:      udp.LocalAddr().String(),
		handlers:  make(map[wire.MsgType]Handler),
		ctx:       ctx,
		cancel:    cancel,
		sem:       make(chan struct{}, cfg.MaxInflight),
		jobs:      make(chan handlerJob),
		peers:     make(map[string]*peer),
		inbound:   make(map[*quic.Conn]struct{}),
	}
	if cfg.AdvertiseAddr != "" {
		t.addr = cfg.AdvertiseAddr
	}
	t.quicConf = &quic.Config{
		HandshakeIdleTimeout: cfg.DialTimeout,
		MaxIdleTimeout:       cfg.IdleTimeout,
		KeepAlivePeriod:      cfg.KeepAlive,
		// A peer uses StreamsPerPeer streams and one for the hello; the
		// rest is room for streams replaced after a failure.
		MaxIncomingStreams:    int64(cfg.StreamsPerPeer) * 16,
		MaxIncomingUniStreams: -1,
		// Windows start small and grow only on connections whose hello
		// verified (allowWindow), up to sizes where frames of 10 MiB fit
		// without stalling on window updates.
		InitialStreamReceiveWindow:     cfg.Limits.PreAuthWindow,
		InitialConnectionReceiveWindow: cfg.Limits.PreAuthWindow,
		MaxStreamReceiveWindow:         16 << 20,
		MaxConnectionReceiveWindow:     64 << 20,
		AllowConnectionWindowIncrease:  t.allowWindow,
	}
	// Stateless resets let a peer of a crashed-and-restarted node drop its
	// dead connection at the restarted node's first answer. Without them a
	// one-way message (an election vote, a report) keeps going into the
	// dead connection until the idle timeout.
	t.tr = &quic.Transport{
		Conn:                udp,
		StatelessResetKey:   (*quic.StatelessResetKey)(&resetKey),
		ConnContext:         t.connContext,
		VerifySourceAddress: t.verifySource,
	}
	t.listener, err = t.tr.Listen(serverTLS, t.quicConf)
	if err != nil {
		cancel()
		udp.Close()
		return nil, fmt.Errorf("quic listen %s: %w", cfg.ListenAddr, err)
	}
	t.wg.Add(2)
	go t.acceptLoop()
	go func() {
		defer t.wg.Done()
		t.expireCalls(min(max(cfg.CallTimeout/20, 10*time.Millisecond), time.Second))
	}()
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
		p.close("node closing")
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
	c, first, err := t.acceptHello(conn)
	if err != nil {
		t.log.Debug("inbound connection failed its hello", "remote", remote, "err", err)
		return
	}
	t.authed.Store(conn, struct{}{})
	defer t.authed.Delete(conn)
	if slot, ok := conn.Context().Value(connKey{}).(*connSlot); ok {
		t.admission.authenticated(slot)
	}
	if first != nil {
		t.wg.Add(1)
		go t.serveStream(c, first)
	}
	for {
		s, err := conn.AcceptStream(t.ctx)
		if err != nil {
			return
		}
		t.wg.Add(1)
		go t.serveStream(c, s)
	}
}

// servedConn is what an inbound connection's hello proved: who is on the
// other end, the key tier of the link, and the channel binding its
// envelopes are sealed to.
type servedConn struct {
	peerID  string
	tier    security.Tier
	channel []byte
	remote  string
}

// serveStream reads request frames off one stream. Envelope checks run
// inline (they are microseconds); handlers run concurrently, and replies
// share the stream under its write lock.
func (t *QUIC) serveStream(c *servedConn, s *quic.Stream) {
	defer t.wg.Done()
	remote := c.remote
	w := newStreamWriter(s, t.stats.ioShard(), t.keys.NewStreamSealer(c.tier), c.peerID, c.channel)
	opener := t.keys.NewStreamOpener(c.tier)
	defer s.Close()
	var (
		buf []byte
		aad []byte // scratch for each envelope's additional data
		env wire.Envelope
	)
	for {
		frame, nb, err := readFrame(s, buf, maxFrameLen)
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
		w.io.in(len(frame))
		msg, perr := t.open(&env, frame, c, opener, &aad)
		// The salt, nonce and body alias buf, which the next frame reuses;
		// only the header outlives this iteration.
		env.Salt, env.Nonce, env.Body = nil, nil, nil
		if perr != nil {
			if perr.decoded && env.Flags&wire.FlagOneWay == 0 && perr.reply != nil {
				t.replyError(w, &env, perr.reply, perr.plain)
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
				t.replyError(w, &env, wire.Errorf(wire.CodeUnavailable, "%s is shutting down", t.cfg.NodeID), false)
			}
			continue
		}
		t.dispatch(handlerJob{w: w, env: env, msg: msg, remote: remote})
	}
}

// handlerJob is one request on its way to a handler: env is the request's
// header by value, since the stream's reader reuses its own for the next
// frame.
type handlerJob struct {
	w      *streamWriter
	env    wire.Envelope
	msg    wire.Message
	remote string
}

// maxIdleHandlers bounds the handler goroutines kept parked between
// requests. A burst past it starts goroutines that end with their request.
const maxIdleHandlers = 64

// dispatch runs j on a parked handler goroutine, or on a new one if none is
// parked. Reusing goroutines is what keeps a request off the cost of a
// fresh goroutine, whose small stack grows (a copy) on every request on
// its way through sealing and QUIC's send path: about 0.9 µs of the 4 µs
// the secure wire spent over bare quic-go per round trip at one caller. Called by a stream reader,
// which the transport's WaitGroup counts, so the Add cannot race Close's
// Wait.
func (t *QUIC) dispatch(j handlerJob) {
	select {
	case t.jobs <- j:
		return
	default:
	}
	t.wg.Add(1)
	go t.handlerLoop(j)
}

// handlerLoop serves j, then waits for the next request while fewer than
// maxIdleHandlers wait, until the transport's context ends.
func (t *QUIC) handlerLoop(j handlerJob) {
	defer t.wg.Done()
	for {
		t.runHandler(j)
		j = handlerJob{} // hold nothing of the request while parked
		if t.idle.Add(1) > maxIdleHandlers {
			t.idle.Add(-1)
			return
		}
		select {
		case j = <-t.jobs:
			t.idle.Add(-1)
		case <-t.ctx.Done():
			return
		}
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
// unsealed because the sender could not be authenticated, decoded that the
// header was read (so there is an id to answer).
type openError struct {
	reply   *wire.Error
	plain   bool
	decoded bool
}

// open runs every check an inbound envelope must pass, cheapest first:
// header decode, sender, rate limit, authenticate, replay, body decode. It
// counts each refusal. The connection's hello already proved its peer holds
// the secret; the envelope must still name that peer as its sender and open
// under this node's id and the connection's channel binding. The header is
// decoded into env and the body opened in place, in frame; aad is the
// stream's scratch for the additional data.
func (t *QUIC) open(env *wire.Envelope, frame []byte, c *servedConn, opener *security.StreamOpener, aad *[]byte) (wire.Message, *openError) {
	remote := c.remote
	if err := wire.DecodeEnvelopeInto(env, frame); err != nil {
		t.stats.malformed.Add(1)
		t.log.Debug("malformed envelope", "remote", remote, "err", err)
		return nil, &openError{}
	}
	if env.Sender != c.peerID {
		t.stats.authFailures.Add(1)
		t.log.Debug("envelope names another sender than its connection's hello", "remote", remote, "hello", c.peerID, "claimed_sender", env.Sender)
		return nil, &openError{reply: &wire.Error{Code: wire.CodeUnauthenticated, Message: "sender does not match the connection's hello"}, plain: true, decoded: true}
	}
	// A peer holding only a lower tier's key (a worker's) may send only the
	// requests that tier sends; a stolen worker key cannot vote or commit.
	if !wire.MaySend(uint8(c.tier), uint8(t.keys.Tier()), env.Type) {
		t.stats.roleRefused.Add(1)
		t.log.Debug("request type refused for the peer's key tier", "remote", remote, "sender", env.Sender, "tier", c.tier.String(), "type", env.Type)
		return nil, &openError{reply: wire.Errorf(wire.CodeRejected, "%s refuses %s from a %s key", t.cfg.NodeID, env.Type, c.tier), decoded: true}
	}
	// Keyed by the proven node id: a node's budget does not grow with the
	// number of connections or source ports it uses.
	if ok, retry := t.limiter.Allow(c.peerID, int(env.Type.Class())); !ok {
		t.stats.rateLimited.Add(1)
		return nil, &openError{reply: &wire.Error{Code: wire.CodeRateLimited, Message: "rate limit for " + env.Type.Class().String() + " messages", RetryAfter: retry}, plain: true, decoded: true}
	}
	if env.Flags&wire.FlagPlainError != 0 {
		// Unsealed errors are only meaningful as replies to our calls.
		return nil, &openError{decoded: true}
	}
	*aad = env.BoundAAD((*aad)[:0], t.cfg.NodeID, c.channel)
	body, err := opener.Open(env.KeyID, env.Salt, env.Nonce, *aad, env.Body, env.Body[:0])
	if err != nil {
		t.stats.authFailures.Add(1)
		t.log.Debug("envelope failed authentication", "remote", remote, "claimed_sender", env.Sender, "key_id", env.KeyID, "err", err)
		return nil, &openError{reply: &wire.Error{Code: wire.CodeUnauthenticated, Message: "envelope did not open with any accepted key (check AUTH_SECRET)"}, plain: true, decoded: true}
	}
	if err := t.replay.Check(env.Sender, env.ID, wire.SnowflakeTime(env.ID)); err != nil {
		t.stats.replaysDropped.Add(1)
		t.log.Debug("replay dropped", "remote", remote, "sender", env.Sender, "id", env.ID, "err", err)
		if errors.Is(err, security.ErrStale) {
			// Not a copy of anything seen: a request that took longer than
			// the window to arrive (it waited behind large frames on a
			// congested path) or a sender whose clock is off. It opened on
			// this connection, so its sender is the proven peer, which is
			// told at once, rather than waiting out its deadline for an
			// answer that never comes. The handler did not run: a retry
			// is safe.
			return nil, &openError{reply: wire.Errorf(wire.CodeUnavailable, "%s refused request %d: %v", t.cfg.NodeID, env.ID, err), decoded: true}
		}
		return nil, &openError{decoded: true} // a replay earns no answer
	}
	// Decode copies what it keeps: nothing of msg aliases frame.
	msg, err := wire.Decode(env.Type, body)
	if err != nil {
		t.stats.malformed.Add(1)
		return nil, &openError{reply: wire.AsError(err), decoded: true}
	}
	return msg, nil
}

// runHandler serves one request.
func (t *QUIC) runHandler(j handlerJob) {
	w, env, msg, remote := j.w, &j.env, j.msg, j.remote
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
		t.replyError(w, env, wire.AsError(err), false)
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
	frame, err := wire.AppendEnvelope(make([]byte, frameHeaderLen, 64+len(body)), env)
	if err != nil {
		return
	}
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-frameHeaderLen))
	if err := t.writeReply(w, frame); err == nil {
		w.io.messagesOut.Add(1)
	}
}

// sealBuf is the scratch for sealing one outbound message, pooled on the
// transport: the body's CBOR, its additional data and nonce, and the frame,
// which is written header first and then the ciphertext sealed straight
// after it.
type sealBuf struct {
	body  bytes.Buffer
	aad   []byte
	nonce [security.NonceSize]byte
	frame []byte
}

func (t *QUIC) getBuf() *sealBuf {
	if sb, ok := t.bufs.Get().(*sealBuf); ok {
		return sb
	}
	return new(sealBuf)
}

// putBuf returns sb to the pool once its frame has been written; a buffer
// grown for a rare large message is left to the collector.
func (t *QUIC) putBuf(sb *sealBuf) {
	if cap(sb.frame) > keepBufLen || sb.body.Cap() > keepBufLen {
		return
	}
	t.bufs.Put(sb)
}

// seal builds the sealed frame for msg with a stream's sealer, bound to the
// stream's peer and connection. The frame is sb.frame; the caller returns
// sb with putBuf once the frame is written.
func (t *QUIC) seal(w *streamWriter, msg wire.Message, replyTo uint64, flags wire.Flags) (uint64, *sealBuf, error) {
	sb := t.getBuf()
	id, err := t.sealInto(sb, w, msg, replyTo, flags)
	if err != nil {
		t.putBuf(sb)
		return 0, nil, err
	}
	return id, sb, nil
}

func (t *QUIC) sealInto(sb *sealBuf, w *streamWriter, msg wire.Message, replyTo uint64, flags wire.Flags) (uint64, error) {
	sb.body.Reset()
	if err := wire.MarshalTo(&sb.body, msg); err != nil {
		return 0, err
	}
	body := sb.body.Bytes()
	if len(body) > maxBodyLen {
		return 0, &wire.Error{Code: wire.CodeTooLarge, Message: fmt.Sprintf("%s body of %d bytes exceeds %d", msg.Type(), len(body), maxBodyLen)}
	}
	key, err := w.sealer.Next(sb.nonce[:])
	if err != nil {
		return 0, fmt.Errorf("seal %s: %w", msg.Type(), err)
	}
	env := wire.Envelope{
		Version: wire.ProtocolVersion,
		KeyID:   key.KeyID,
		Sender:  t.cfg.NodeID,
		Type:    msg.Type(),
		ID:      t.ids.Next(),
		ReplyTo: replyTo,
		Flags:   flags,
		Salt:    key.Salt,
		Nonce:   sb.nonce[:],
	}
	sb.aad = env.BoundAAD(sb.aad[:0], w.recipient, w.channel)
	frame, err := env.AppendHeader(append(sb.frame[:0], 0, 0, 0, 0))
	if err != nil {
		return 0, err
	}
	frame = key.Seal(frame, sb.nonce[:], sb.aad, body)
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-frameHeaderLen))
	sb.frame = frame
	return env.ID, nil
}

// writeReply writes a reply frame within Config.ReplyTimeout (sooner if the
// transport closes). A reply that could not be written in that time is to a
// caller that stopped reading: the stream is reset, so the handler's slot is
// free again and the caller's reads fail at once instead of meeting part of
// a frame. A reply that merely left the queue still goes out whole with its
// batch, and the stream stays.
func (t *QUIC) writeReply(w *streamWriter, frame []byte) error {
	err := w.write(t.ctx, time.Now().Add(t.cfg.ReplyTimeout), frame)
	if err != nil && !errors.Is(err, errLeftInQueue) {
		w.s.CancelWrite(codeReplyStalled)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.stats.repliesStalled.Add(1)
		}
	}
	return err
}

func (t *QUIC) writeMessage(w *streamWriter, msg wire.Message, replyTo uint64, flags wire.Flags) error {
	_, sb, err := t.seal(w, msg, replyTo, flags)
	if err != nil {
		return err
	}
	defer t.putBuf(sb)
	if err := t.writeReply(w, sb.frame); err != nil {
		return err
	}
	w.io.out(len(sb.frame))
	return nil
}

// streamWriter serialises whole frames onto a stream shared by many
// goroutines, and owns the stream's sealer. Writers combine: whoever finds
// the stream idle writes every frame queued meanwhile, a batch per Write, so
// concurrent callers share one pass through quic-go's send path instead of
// queueing for it one frame at a time.
//
// A write may carry a deadline: a write blocks once the peer's flow-control
// window is full, and a peer that crashed never opens it again. The writer
// puts the deadline on the stream itself (quic-go arms a timer only if the
// write has to wait), so a call costs no timer or callback of its own.
type streamWriter struct {
	s      *quic.Stream
	io     *ioCounters // the stream's shard of the message counters
	sealer *security.StreamSealer
	// recipient and channel are the peer's node id and the connection's
	// channel binding, sealed into every envelope written here.
	recipient string
	channel   []byte

	mu      sync.Mutex
	pending *writeBatch // frames waiting for the current write to finish
	writing bool
	// deadline is the write deadline last set on s; only the goroutine
	// holding the writing role reads or sets it.
	deadline time.Time
	// broken is the error of a write that failed; see failLocked.
	broken error
}

type writeBatch struct {
	buf      []byte
	deadline time.Time // the latest of its frames' deadlines; zero: none
	// unbounded: some frame's caller set no deadline, so neither does the
	// batch.
	unbounded bool
	done      chan struct{}
	err       error
}

func newStreamWriter(s *quic.Stream, io *ioCounters, sealer *security.StreamSealer, recipient string, channel []byte) *streamWriter {
	return &streamWriter{s: s, io: io, sealer: sealer, recipient: recipient, channel: channel}
}

// errLeftInQueue: the caller stopped waiting while its frame was queued
// behind another write. The frame is still sent, whole, with its batch, so
// the stream is fine; only this caller has gone.
var errLeftInQueue = errors.New("gave up waiting for the stream")

// write returns once frame has been handed to QUIC, or failed to be. It
// gives up at deadline (zero: none), which the caller's ctx, if it has one,
// also bounds, when this goroutine writes: by the stream's write deadline,
// and then the stream may hold part of a frame, so the caller must drop it.
// When it waits for another goroutine to write, it gives up when a non-nil
// ctx ends (errLeftInQueue), and then the stream is intact and must be
// kept; without a ctx it waits for that write, which its own deadline
// bounds.
func (w *streamWriter) write(ctx context.Context, deadline time.Time, frame []byte) error {
	w.mu.Lock()
	if w.broken != nil {
		err := w.broken
		w.mu.Unlock()
		return err
	}
	if !w.writing && w.pending == nil {
		// Idle stream: write our frame as it is, no copy, then lead any
		// batch that formed behind it.
		w.writing = true
		w.mu.Unlock()
		partial, err := w.writeOut(frame, deadline)
		w.mu.Lock()
		w.failLocked(err, partial)
		w.drain()
		w.mu.Unlock()
		return err
	}
	if w.pending == nil {
		w.pending = &writeBatch{done: make(chan struct{})}
	}
	b := w.pending
	b.buf = append(b.buf, frame...)
	// The batch may take as long as its most patient frame: a frame whose
	// caller's deadline passes first leaves the queue (errLeftInQueue), and
	// its deadline must not cut the write short for the rest.
	switch {
	case deadline.IsZero():
		b.unbounded, b.deadline = true, time.Time{}
	case !b.unbounded && deadline.After(b.deadline):
		b.deadline = deadline
	}
	if w.writing {
		w.mu.Unlock()
		if ctx == nil {
			<-b.done
			return b.err
		}
		select {
		case <-b.done:
			return b.err
		case <-ctx.Done():
			// The write ahead of ours may be blocked with a later
			// deadline (or none); ours has passed. Our frame stays in
			// the batch and goes out whole with it: the stream is intact.
			w.io.leftQueue.Add(1)
			return fmt.Errorf("%w: %w", errLeftInQueue, ctx.Err())
		}
	}
	// Lead: write batches until none is waiting. Under sustained load the
	// leader may write others' frames for a while; they are all on one
	// stream, so someone has to, and it costs the leader only latency.
	w.writing = true
	w.drain()
	w.mu.Unlock()
	return b.err
}

// writeOut writes buf under deadline. Called only by the writing role.
func (w *streamWriter) writeOut(buf []byte, deadline time.Time) (partial bool, err error) {
	if !deadline.Equal(w.deadline) {
		w.s.SetWriteDeadline(deadline)
		w.deadline = deadline
	}
	n, err := w.s.Write(buf)
	return err != nil && n > 0, err
}

// drain writes queued batches until none is left, then gives up the lead.
// Called with mu held and writing set; returns with mu held.
func (w *streamWriter) drain() {
	for w.pending != nil {
		batch := w.pending
		w.pending = nil
		if w.broken != nil {
			batch.err = w.broken
			close(batch.done)
			continue
		}
		w.mu.Unlock()
		var partial bool
		partial, batch.err = w.writeOut(batch.buf, batch.deadline)
		close(batch.done)
		w.mu.Lock()
		w.failLocked(batch.err, partial)
	}
	w.writing = false
}

// failLocked marks the stream broken after a write that failed part way:
// the stream holds part of a frame, so nothing more may follow on it,
// whether or not anyone is still waiting to hear about the failure (every
// caller of the batch may have left the queue). Later writes get the error
// at once, and their callers drop the stream. A write that failed before
// its first byte (a batch whose callers' deadlines had all passed) leaves
// the stream as it was.
func (w *streamWriter) failLocked(err error, partial bool) {
	if partial && w.broken == nil {
		w.broken = err
	}
}
