package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"tempest/security"
	"tempest/wire"
)

// Every connection starts with a hello exchange on its first stream, before
// any envelope: the dialer sends wire.Hello (its node id and an HMAC proof of
// the secret), the listener checks it and answers wire.HelloAck with its own
// id and proof. Both proofs cover a TLS exporter value, the channel binding,
// which both ends of one TLS session share and nobody else knows: a proof
// cannot be replayed on another connection, and a relay in the middle (the
// certificates are self-signed and unverified) holds two sessions with two
// different values, so it can forward neither hello.
//
// Until its hello verifies, an inbound connection costs little: one stream is
// read, at most wire.MaxHelloSize bytes, within Limits.HelloTimeout; QUIC
// flow control keeps anything else it sends under Limits.PreAuthWindow; and
// the number of such connections is capped per source IP and in total.
const (
	exporterLabel = "EXPORTER-tempest-channel-v1"
	channelLen    = 32
	helloClient   = "tempest hello v1 dialer"
	helloServer   = "tempest hello v1 listener"
)

// codeHelloRefused closes a connection whose hello failed; the reason text
// travels with it so an operator with a mistyped secret sees why.
const codeHelloRefused quic.ApplicationErrorCode = 3

// codeConnRefused closes a connection refused by a connection limit.
const codeConnRefused quic.ApplicationErrorCode = 4

// channelBinding derives the connection's channel binding from its TLS
// session.
func channelBinding(conn *quic.Conn) ([]byte, error) {
	st := conn.ConnectionState().TLS
	b, err := st.ExportKeyingMaterial(exporterLabel, nil, channelLen)
	if err != nil {
		return nil, fmt.Errorf("tls exporter: %w", err)
	}
	return b, nil
}

// helloTranscript is what a hello proof covers: the side of the prover,
// the key tier, the channel binding and the node ids known at that point.
func helloTranscript(label string, tier security.Tier, channel []byte, ids ...string) []byte {
	b := make([]byte, 0, len(label)+len(channel)+64)
	b = append(b, label...)
	b = append(b, byte(tier))
	b = append(b, channel...)
	for _, id := range ids {
		b = binary.AppendUvarint(b, uint64(len(id)))
		b = append(b, id...)
	}
	return b
}

// errHelloTimeout: an inbound connection did not complete its hello in time.
var errHelloTimeout = errors.New("hello timed out")

// acceptHello runs the listener's side of the hello on a new inbound
// connection and returns what it proved (the dialer's node id, the link's
// key tier, the channel binding) and, if the dialer opened its first stream
// so fast that it was accepted here, that stream. Every failure is counted.
func (t *QUIC) acceptHello(conn *quic.Conn) (*servedConn, *quic.Stream, error) {
	ctx, cancel := context.WithTimeout(t.ctx, t.cfg.Limits.HelloTimeout)
	defer cancel()
	s, err := conn.AcceptStream(ctx)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			t.stats.helloTimeouts.Add(1)
			return nil, nil, errHelloTimeout
		}
		return nil, nil, err
	}
	defer s.Close()
	defer s.CancelRead(codeStreamClosed)
	// A dialer waits for our ack before it opens another stream, so a
	// second stream now is a flood, not a peer: refuse the connection at
	// once rather than let it sit on streams until the hello times out.
	// answered is set just before the ack leaves: a stream accepted after
	// that is the dialer's first real one, handed back to serveConn.
	var answered atomic.Bool
	var next *quic.Stream
	early := make(chan struct{})
	watchCtx, stopWatch := context.WithCancel(ctx)
	go func() {
		defer close(early)
		s, err := conn.AcceptStream(watchCtx)
		if err != nil {
			return
		}
		if answered.Load() {
			next = s
			return
		}
		t.stats.malformed.Add(1)
		refuse(conn, "stream opened before the hello was answered")
	}()
	defer func() { stopWatch(); <-early }()
	deadline, _ := ctx.Deadline()
	s.SetDeadline(deadline)
	frame, _, err := readFrame(s, nil, wire.MaxHelloSize)
	if err != nil {
		var big errFrameTooLarge
		var ne net.Error
		switch {
		case errors.As(err, &big):
			t.stats.tooLarge.Add(1)
			return nil, nil, refuse(conn, big.Error())
		case errors.As(err, &ne) && ne.Timeout():
			t.stats.helloTimeouts.Add(1)
			return nil, nil, errHelloTimeout
		}
		return nil, nil, err
	}
	t.stats.io[0].bytesIn.Add(uint64(len(frame) + frameHeaderLen))
	h, err := wire.DecodeHello(frame)
	if err != nil {
		t.stats.malformed.Add(1)
		return nil, nil, refuse(conn, "malformed hello: "+err.Error())
	}
	channel, err := channelBinding(conn)
	if err != nil {
		return nil, nil, err
	}
	// The link's tier is the highest tier of the dialer's proofs that this
	// node holds too and that verifies: the lower of the two nodes' tiers.
	own := t.keys.Tier()
	var link security.Tier
	var lastErr error
	for _, p := range slices.SortedFunc(slices.Values(h.Proofs), func(a, b wire.HelloProof) int { return int(b.Tier) - int(a.Tier) }) {
		tier := security.Tier(p.Tier)
		if tier > own {
			continue
		}
		if lastErr = t.keys.VerifyProof(tier, p.KeyID, helloTranscript(helloClient, tier, channel, h.NodeID), p.Proof); lastErr == nil {
			link = tier
			break
		}
	}
	if link == security.TierNone {
		t.stats.authFailures.Add(1)
		t.log.Debug("hello failed authentication", "remote", conn.RemoteAddr().String(), "claimed_sender", h.NodeID, "err", lastErr)
		reason := "hello did not verify with any accepted key (check AUTH_SECRET)"
		if lastErr != nil {
			reason += ": " + lastErr.Error()
		}
		return nil, nil, refuse(conn, reason)
	}
	keyID, proof, err := t.keys.Prove(link, helloTranscript(helloServer, link, channel, t.cfg.NodeID, h.NodeID))
	if err != nil {
		return nil, nil, refuse(conn, "hello: "+err.Error())
	}
	ack, err := wire.Marshal(&wire.HelloAck{NodeID: t.cfg.NodeID, Proof: wire.HelloProof{Tier: uint8(link), KeyID: keyID, Proof: proof}})
	if err != nil {
		return nil, nil, err
	}
	answered.Store(true)
	if _, err := s.Write(appendFrame(nil, ack)); err != nil {
		return nil, nil, fmt.Errorf("hello ack: %w", err)
	}
	stopWatch()
	<-early
	return &servedConn{peerID: h.NodeID, tier: link, channel: channel, remote: conn.RemoteAddr().String()}, next, nil
}

// refuse closes conn with the hello-refused code and reason.
func refuse(conn *quic.Conn, reason string) error {
	conn.CloseWithError(codeHelloRefused, reason)
	return errors.New(reason)
}

// dialHello runs the dialer's side of the hello on a connection we just
// dialed and returns the listener's proven node id, the link's key tier and
// the channel binding. A refusal comes back as a *wire.Error
// (unauthenticated), which callers and breakers treat as an answer from a
// live peer.
func (t *QUIC) dialHello(ctx context.Context, conn *quic.Conn, addr string) (string, security.Tier, []byte, error) {
	channel, err := channelBinding(conn)
	if err != nil {
		return "", 0, nil, err
	}
	s, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return "", 0, nil, helloErr(addr, err)
	}
	defer s.Close()
	defer s.CancelRead(codeStreamClosed)
	if d, ok := ctx.Deadline(); ok {
		s.SetDeadline(d)
	}
	// A proof for every tier we hold: the listener verifies the highest it
	// holds too.
	h := &wire.Hello{NodeID: t.cfg.NodeID}
	for tier := t.keys.Tier(); tier >= security.TierWorker; tier-- {
		keyID, proof, err := t.keys.Prove(tier, helloTranscript(helloClient, tier, channel, t.cfg.NodeID))
		if err != nil {
			return "", 0, nil, err
		}
		h.Proofs = append(h.Proofs, wire.HelloProof{Tier: uint8(tier), KeyID: keyID, Proof: proof})
	}
	hello, err := wire.Marshal(h)
	if err != nil {
		return "", 0, nil, err
	}
	if _, err := s.Write(appendFrame(nil, hello)); err != nil {
		return "", 0, nil, helloErr(addr, err)
	}
	frame, _, err := readFrame(s, nil, wire.MaxHelloSize)
	if err != nil {
		return "", 0, nil, helloErr(addr, err)
	}
	ack, err := wire.DecodeHelloAck(frame)
	if err != nil {
		t.stats.malformed.Add(1)
		return "", 0, nil, fmt.Errorf("hello ack from %s: %w", addr, err)
	}
	link := security.Tier(ack.Proof.Tier)
	if err := t.keys.VerifyProof(link, ack.Proof.KeyID, helloTranscript(helloServer, link, channel, ack.NodeID, t.cfg.NodeID), ack.Proof.Proof); err != nil {
		t.stats.authFailures.Add(1)
		return "", 0, nil, fmt.Errorf("hello ack from %s: %w", addr, &wire.Error{Code: wire.CodeUnauthenticated, Message: "listener did not prove the secret: " + err.Error()})
	}
	return ack.NodeID, link, channel, nil
}

// helloErr turns the listener closing the connection on our hello into the
// typed unauthenticated error it stands for.
func helloErr(addr string, err error) error {
	var ae *quic.ApplicationError
	if errors.As(err, &ae) && ae.Remote {
		switch ae.ErrorCode {
		case codeHelloRefused:
			return fmt.Errorf("hello to %s: %w", addr, &wire.Error{Code: wire.CodeUnauthenticated, Message: ae.ErrorMessage})
		case codeConnRefused:
			return fmt.Errorf("hello to %s: %w", addr, &wire.Error{Code: wire.CodeRateLimited, Message: ae.ErrorMessage, RetryAfter: time.Second})
		}
	}
	return fmt.Errorf("hello to %s: %w: %v", addr, ErrNotDelivered, err)
}

// ---- inbound connection limits ----------------------------------------------

// admission counts inbound connections by source IP, authenticated or not,
// and refuses new ones past the limits. quic-go calls admit (through
// Transport.ConnContext) on a connection's first packet, before the TLS
// handshake, so a refusal costs one packet's work.
type admission struct {
	lim     Limits
	rate    *security.RateLimiter // connection attempts per IP
	pending atomic.Int64          // read lock-free by VerifySourceAddress

	mu        sync.Mutex
	total     int
	byIP      map[string]int
	pendingIP map[string]int
}

type connKey struct{}

// connSlot is one admitted inbound connection's place in the counts.
type connSlot struct {
	ip      string
	pending bool // still counted as pending; guarded by admission.mu
}

func newAdmission(lim Limits, now func() time.Time) (*admission, error) {
	rl, err := security.NewRateLimiter(security.RateLimitConfig{
		Limits: []security.Limit{{PerSecond: lim.ConnsPerSecondPerIP, Burst: lim.ConnBurstPerIP}},
		Now:    now,
	})
	if err != nil {
		return nil, fmt.Errorf("connection rate limiter: %w", err)
	}
	return &admission{lim: lim, rate: rl, byIP: make(map[string]int), pendingIP: make(map[string]int)}, nil
}

// errRefused says which limit refused a connection.
type errRefused struct{ why string }

func (e errRefused) Error() string { return "connection refused: " + e.why }

func (a *admission) admit(ip string) (*connSlot, error) {
	if ok, _ := a.rate.Allow(ip, 0); !ok {
		return nil, errRefused{"too many connection attempts from " + ip}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.total >= a.lim.MaxConns:
		return nil, errRefused{fmt.Sprintf("%d connections open", a.total)}
	case a.byIP[ip] >= a.lim.MaxConnsPerIP:
		return nil, errRefused{fmt.Sprintf("%d connections open from %s", a.byIP[ip], ip)}
	case int(a.pending.Load()) >= a.lim.MaxPendingConns:
		return nil, errRefused{fmt.Sprintf("%d connections awaiting their hello", a.pending.Load())}
	case a.pendingIP[ip] >= a.lim.MaxPendingPerIP:
		return nil, errRefused{fmt.Sprintf("%d connections from %s awaiting their hello", a.pendingIP[ip], ip)}
	}
	a.total++
	a.byIP[ip]++
	a.pendingIP[ip]++
	a.pending.Add(1)
	return &connSlot{ip: ip, pending: true}, nil
}

// authenticated moves a slot out of the pending counts.
func (a *admission) authenticated(s *connSlot) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.unpend(s)
}

func (a *admission) unpend(s *connSlot) {
	if !s.pending {
		return
	}
	s.pending = false
	a.pending.Add(-1)
	if a.pendingIP[s.ip]--; a.pendingIP[s.ip] <= 0 {
		delete(a.pendingIP, s.ip)
	}
}

// release frees a slot when its connection ends.
func (a *admission) release(s *connSlot) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.unpend(s)
	a.total--
	if a.byIP[s.ip]--; a.byIP[s.ip] <= 0 {
		delete(a.byIP, s.ip)
	}
}

// connContext is quic.Transport.ConnContext: admission control before the
// handshake.
func (t *QUIC) connContext(ctx context.Context, info *quic.ClientInfo) (context.Context, error) {
	ip := hostOf(info.RemoteAddr)
	slot, err := t.admission.admit(ip)
	if err != nil {
		t.stats.connsRefused.Add(1)
		t.log.Debug("inbound connection refused", "remote", info.RemoteAddr.String(), "err", err)
		return nil, err
	}
	// The context ends with the connection, whether its handshake failed,
	// its hello failed, or it closed later.
	context.AfterFunc(ctx, func() { t.admission.release(slot) })
	return context.WithValue(ctx, connKey{}, slot), nil
}

// verifySource asks quic-go for a Retry round trip (proof that the source
// address is real) once many connections are pending, so spoofed sources
// cannot fill the pending slots.
func (t *QUIC) verifySource(net.Addr) bool {
	return t.admission.pending.Load() > int64(t.cfg.Limits.MaxPendingConns/2)
}

// allowWindow keeps the flow-control window of a connection that has not
// completed its hello at its initial size, so bytes it sends on streams we
// do not read stay within Limits.PreAuthWindow.
func (t *QUIC) allowWindow(conn *quic.Conn, _ uint64) bool {
	_, ok := t.authed.Load(conn)
	return ok
}

func hostOf(a net.Addr) string {
	if ua, ok := a.(*net.UDPAddr); ok {
		return ua.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}
