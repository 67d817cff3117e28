package transport

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"tempest/internal/testutil"
	"tempest/security"
	"tempest/wire"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

const (
	secretOld = "old-secret-7f3a9c1e5b2d8f4a6c0e9b1d3f5a7c9e"
	secretNew = "new-secret-2b4d6f8a0c1e3f5b7d9a2c4e6f8b0d1a"
	secretBad = "bad-secret-9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type nodeOpts struct {
	current, previous string
	listen            string
	tweak             func(*Config)
}

func newNode(t *testing.T, id string, o nodeOpts) *QUIC {
	t.Helper()
	if o.current == "" {
		o.current = secretOld
	}
	kr, err := security.NewKeyring(o.current, o.previous)
	if err != nil {
		t.Fatalf("keyring: %v", err)
	}
	cfg := DefaultConfig()
	cfg.NodeID = id
	cfg.Keyring = kr
	cfg.Logger = quietLogger()
	cfg.CallTimeout = 3 * time.Second
	cfg.DrainTimeout = time.Second
	if o.listen != "" {
		cfg.ListenAddr = o.listen
	}
	if o.tweak != nil {
		o.tweak(&cfg)
	}
	tr, err := NewQUIC(cfg)
	if err != nil {
		t.Fatalf("new transport %s: %v", id, err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// echo registers a handler for every type that answers with the request
// itself and counts one-way arrivals.
func echo(tr Transport, oneway *sync.Map) {
	for _, typ := range wire.Types() {
		typ := typ
		tr.Handle(typ, func(ctx context.Context, from Peer, msg wire.Message) (wire.Message, error) {
			if oneway != nil {
				v, _ := oneway.LoadOrStore(typ, new(atomic.Int64))
				v.(*atomic.Int64).Add(1)
			}
			return msg, nil
		})
	}
}

func ping(ctx context.Context, tr Transport, addr string) error {
	resp, err := tr.Call(ctx, addr, &wire.Ping{Seq: 7, Payload: []byte("hi")})
	if err != nil {
		return err
	}
	p, ok := resp.(*wire.Ping)
	if !ok || p.Seq != 7 {
		return fmt.Errorf("unexpected reply %#v", resp)
	}
	return nil
}

func TestExchangeEveryMessageBothWays(t *testing.T) {
	a := newNode(t, "a", nodeOpts{})
	b := newNode(t, "b", nodeOpts{})
	var aSeen, bSeen sync.Map
	echo(a, &aSeen)
	echo(b, &bSeen)
	ctx := context.Background()
	pairs := []struct {
		from, to *QUIC
		seen     *sync.Map
	}{{a, b, &bSeen}, {b, a, &aSeen}}
	for _, p := range pairs {
		for _, typ := range wire.Types() {
			if typ == wire.TypeError {
				continue // a reply type: as a request it would read as a failure
			}
			req, _ := wire.New(typ)
			resp, err := p.from.Call(ctx, p.to.Addr(), req)
			if err != nil {
				t.Fatalf("%s -> %s call %s: %v", p.from.LocalID(), p.to.LocalID(), typ, err)
			}
			if resp.Type() != typ {
				t.Fatalf("%s: reply type %s", typ, resp.Type())
			}
			if err := p.from.Send(ctx, p.to.Addr(), req); err != nil {
				t.Fatalf("%s -> %s send %s: %v", p.from.LocalID(), p.to.LocalID(), typ, err)
			}
		}
	}
	// Every type arrived twice at each side: once as a call, once one-way.
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		for _, p := range pairs {
			for _, typ := range wire.Types() {
				if typ == wire.TypeError {
					continue
				}
				v, ok := p.seen.Load(typ)
				if !ok || v.(*atomic.Int64).Load() != 2 {
					return fmt.Errorf("%s at %s: not yet seen twice", typ, p.to.LocalID())
				}
			}
		}
		return nil
	})
	if s := b.Stats(); s.AuthFailures+s.ReplaysDropped+s.Malformed != 0 {
		t.Fatalf("clean exchange counted refusals: %+v", s)
	}
}

func TestHandlerErrorsAreTyped(t *testing.T) {
	a := newNode(t, "a", nodeOpts{})
	b := newNode(t, "b", nodeOpts{})
	b.Handle(wire.TypePing, func(ctx context.Context, from Peer, msg wire.Message) (wire.Message, error) {
		return nil, &wire.Error{Code: wire.CodeNotLeader, Leader: "m2", LeaderAddr: "10.0.0.2:1"}
	})
	b.Handle(wire.TypeJobSubmission, func(ctx context.Context, from Peer, msg wire.Message) (wire.Message, error) {
		return nil, errors.New("disk on fire")
	})
	ctx := context.Background()
	_, err := a.Call(ctx, b.Addr(), &wire.Ping{})
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeNotLeader || we.Leader != "m2" {
		t.Fatalf("want not-leader error naming m2, got %v", err)
	}
	_, err = a.Call(ctx, b.Addr(), &wire.JobSubmission{JobID: "j1"})
	if wire.CodeOf(err) != wire.CodeInternal {
		t.Fatalf("want internal error, got %v", err)
	}
	_, err = a.Call(ctx, b.Addr(), &wire.CancelJob{JobID: "j1"})
	if wire.CodeOf(err) != wire.CodeNoHandler {
		t.Fatalf("want no-handler error, got %v", err)
	}
}

func TestWrongSecretGetsNothingThrough(t *testing.T) {
	b := newNode(t, "b", nodeOpts{})
	a := newNode(t, "a", nodeOpts{})
	evil := newNode(t, "evil", nodeOpts{current: secretBad})
	var served atomic.Int64
	b.Handle(wire.TypePing, func(ctx context.Context, from Peer, msg wire.Message) (wire.Message, error) {
		served.Add(1)
		return msg, nil
	})
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		_, err := evil.Call(ctx, b.Addr(), &wire.Ping{Seq: uint64(i)})
		if wire.CodeOf(err) != wire.CodeUnauthenticated {
			t.Fatalf("wrong secret: want unauthenticated, got %v", err)
		}
		// The hello fails before anything is sent, so even a one-way
		// message learns it was refused.
		if err := evil.Send(ctx, b.Addr(), &wire.Ping{}); wire.CodeOf(err) != wire.CodeUnauthenticated {
			t.Fatalf("wrong secret, one-way: want unauthenticated, got %v", err)
		}
	}
	testutil.Eventually(t, 3*time.Second, 10*time.Millisecond, func() error {
		if n := b.Stats().AuthFailures; n < 10 {
			return fmt.Errorf("auth failures counted %d, want 10", n)
		}
		return nil
	})
	if served.Load() != 0 {
		t.Fatalf("handler ran %d times for a peer without the secret", served.Load())
	}
	if err := ping(ctx, a, b.Addr()); err != nil {
		t.Fatalf("legitimate peer refused after attack: %v", err)
	}
}

// rawClient speaks QUIC to a transport without the envelope layer, to feed
// it captured, forged or broken frames. Dialed with dialRaw it has passed
// the hello with the credentials of a real node (as), so it can seal
// envelopes for this connection with sealFor.
type rawClient struct {
	conn     *quic.Conn
	s        *quic.Stream
	as       *QUIC
	remoteID string
	tier     security.Tier
	channel  []byte
}

func dialRawConn(t *testing.T, addr string) *quic.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{alpn}}, nil)
	if err != nil {
		t.Fatalf("raw dial: %v", err)
	}
	t.Cleanup(func() { conn.CloseWithError(0, "") })
	return conn
}

// dialRaw connects to addr and passes the hello as node as.
func dialRaw(t *testing.T, addr string, as *QUIC) *rawClient {
	t.Helper()
	conn := dialRawConn(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	remoteID, tier, channel, err := as.dialHello(ctx, conn, addr)
	if err != nil {
		t.Fatalf("raw hello: %v", err)
	}
	s, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatalf("raw stream: %v", err)
	}
	return &rawClient{conn: conn, s: s, as: as, remoteID: remoteID, tier: tier, channel: channel}
}

// sealFor seals msg as r.as would for this connection.
func (r *rawClient) sealFor(t *testing.T, msg wire.Message) (uint64, []byte) {
	t.Helper()
	id, sb, err := r.as.seal(&streamWriter{sealer: r.as.keys.NewStreamSealer(r.tier), recipient: r.remoteID, channel: r.channel}, msg, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return id, bytes.Clone(sb.frame)
}

func (r *rawClient) write(t *testing.T, frame []byte) {
	t.Helper()
	if _, err := r.s.Write(frame); err != nil {
		t.Fatalf("raw write: %v", err)
	}
}

// readReply reads one reply envelope.
func (r *rawClient) readReply(t *testing.T) *wire.Envelope {
	t.Helper()
	r.s.SetReadDeadline(time.Now().Add(3 * time.Second))
	frame, _, err := readFrame(r.s, nil, maxFrameLen)
	if err != nil {
		t.Fatalf("raw read: %v", err)
	}
	env, err := wire.DecodeEnvelope(frame)
	if err != nil {
		t.Fatalf("raw decode: %v", err)
	}
	return env
}

func TestReplayedEnvelopesAreDropped(t *testing.T) {
	b := newNode(t, "b", nodeOpts{})
	var served atomic.Int64
	b.Handle(wire.TypePing, func(ctx context.Context, from Peer, msg wire.Message) (wire.Message, error) {
		served.Add(1)
		return msg, nil
	})
	// A genuine frame from node a, written twice on its connection.
	a := newNode(t, "a", nodeOpts{})
	raw := dialRaw(t, b.Addr(), a)
	_, captured := raw.sealFor(t, &wire.Ping{Seq: 1})
	// And one from node "late", whose clock (and so snowflake) is 2 minutes
	// behind: outside the default 60 s window.
	late := newNode(t, "late", nodeOpts{tweak: func(c *Config) {
		c.Now = func() time.Time { return time.Now().Add(-2 * time.Minute) }
	}})
	rawLate := dialRaw(t, b.Addr(), late)
	_, stale := rawLate.sealFor(t, &wire.Ping{Seq: 2})

	raw.write(t, captured)
	if env := raw.readReply(t); env.Type != wire.TypePing {
		t.Fatalf("first delivery should be served, got %s", env.Type)
	}
	raw.write(t, captured)  // inside the window: a replay
	rawLate.write(t, stale) // outside the window
	testutil.Eventually(t, 3*time.Second, 10*time.Millisecond, func() error {
		if n := b.Stats().ReplaysDropped; n != 2 {
			return fmt.Errorf("replays dropped %d, want 2", n)
		}
		return nil
	})
	if served.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1", served.Load())
	}
}

func TestRotationThreePasses(t *testing.T) {
	// Two nodes roll one at a time through install / use / remove. At every
	// step both directions must work.
	type keys struct{ cur, prev string }
	steps := []struct {
		name string
		a, b keys
	}{
		{"start", keys{secretOld, ""}, keys{secretOld, ""}},
		{"install a", keys{secretOld, secretNew}, keys{secretOld, ""}},
		{"install b", keys{secretOld, secretNew}, keys{secretOld, secretNew}},
		{"use a", keys{secretNew, secretOld}, keys{secretOld, secretNew}},
		{"use b", keys{secretNew, secretOld}, keys{secretNew, secretOld}},
		{"remove a", keys{secretNew, ""}, keys{secretNew, secretOld}},
		{"remove b", keys{secretNew, ""}, keys{secretNew, ""}},
	}
	a := newNode(t, "a", nodeOpts{})
	b := newNode(t, "b", nodeOpts{})
	echo(a, nil)
	echo(b, nil)
	ctx := context.Background()
	for _, st := range steps {
		if err := a.keys.Reload(st.a.cur, st.a.prev); err != nil {
			t.Fatalf("%s: reload a: %v", st.name, err)
		}
		if err := b.keys.Reload(st.b.cur, st.b.prev); err != nil {
			t.Fatalf("%s: reload b: %v", st.name, err)
		}
		if err := ping(ctx, a, b.Addr()); err != nil {
			t.Fatalf("%s: a -> b: %v", st.name, err)
		}
		if err := ping(ctx, b, a.Addr()); err != nil {
			t.Fatalf("%s: b -> a: %v", st.name, err)
		}
	}
	// A node left on the old secret alone is refused once pass 3 is done.
	straggler := newNode(t, "straggler", nodeOpts{current: secretOld})
	if err := ping(ctx, straggler, a.Addr()); wire.CodeOf(err) != wire.CodeUnauthenticated {
		t.Fatalf("old-secret node after rotation: want unauthenticated, got %v", err)
	}
}

func TestRotationIssueScenario(t *testing.T) {
	// Node A holds new and previous, B only the old: they talk both ways.
	// Once A drops the previous secret, B's traffic is refused.
	a := newNode(t, "a", nodeOpts{current: secretOld, previous: secretNew})
	b := newNode(t, "b", nodeOpts{current: secretOld})
	echo(a, nil)
	echo(b, nil)
	ctx := context.Background()
	if err := ping(ctx, a, b.Addr()); err != nil {
		t.Fatalf("a -> b: %v", err)
	}
	if err := ping(ctx, b, a.Addr()); err != nil {
		t.Fatalf("b -> a: %v", err)
	}
	if err := a.keys.Reload(secretNew, ""); err != nil {
		t.Fatal(err)
	}
	if err := ping(ctx, b, a.Addr()); wire.CodeOf(err) != wire.CodeUnauthenticated {
		t.Fatalf("after A dropped the old secret, B should be refused, got %v", err)
	}
}

func TestFloodIsRateLimitedPerSource(t *testing.T) {
	limits := security.DefaultRateLimitConfig(wire.NumClasses)
	limits.Limits[wire.ClassDiag] = security.Limit{PerSecond: 20, Burst: 10}
	b := newNode(t, "b", nodeOpts{tweak: func(c *Config) { c.RateLimit = limits }})
	echo(b, nil)
	flooder := newNode(t, "flooder", nodeOpts{})
	polite := newNode(t, "polite", nodeOpts{})
	ctx := context.Background()

	var limited, ok atomic.Int64
	var retryAfter atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				err := ping(ctx, flooder, b.Addr())
				var we *wire.Error
				switch {
				case err == nil:
					ok.Add(1)
				case errors.As(err, &we) && we.Code == wire.CodeRateLimited:
					limited.Add(1)
					retryAfter.Store(int64(we.RetryAfter))
				default:
					t.Errorf("flood call: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	if limited.Load() == 0 || retryAfter.Load() <= 0 {
		t.Fatalf("flood of 200 calls: %d limited (retry-after %v), want some refused with a retry-after", limited.Load(), time.Duration(retryAfter.Load()))
	}
	if ok.Load() == 0 {
		t.Fatalf("flood: the burst should have been served")
	}
	if err := ping(ctx, polite, b.Addr()); err != nil {
		t.Fatalf("another source was refused during the flood: %v", err)
	}
	if b.Stats().RateLimited != uint64(limited.Load()) {
		t.Fatalf("counter %d != refusals seen %d", b.Stats().RateLimited, limited.Load())
	}
	// A retrying caller honours retry-after and gets through.
	if _, err := flooder.Call(ctx, b.Addr(), &wire.Ping{}, WithRetries(10)); err != nil {
		t.Fatalf("retrying call after flood: %v", err)
	}
}

func TestOversizedAndMalformedInput(t *testing.T) {
	a := newNode(t, "a", nodeOpts{})
	b := newNode(t, "b", nodeOpts{})
	echo(b, nil)
	ctx := context.Background()

	// The sender refuses a body over the cap before it leaves.
	_, err := a.Call(ctx, b.Addr(), &wire.Ping{Payload: make([]byte, wire.MaxMessageSize+1)})
	if wire.CodeOf(err) != wire.CodeTooLarge {
		t.Fatalf("oversized call: want too_large, got %v", err)
	}

	// Garbage frame, then a frame with a valid envelope but a body that is
	// not the CBOR its type says: counted, answered where possible, and the
	// stream keeps serving.
	raw := dialRaw(t, b.Addr(), a)
	raw.write(t, appendFrame(nil, []byte("\xff\x00not cbor at all")))
	body := []byte{0xa1, 0x01, 0x61} // truncated map
	env := &wire.Envelope{Version: wire.ProtocolVersion, Sender: "a", Type: wire.TypePing, ID: a.ids.Next()}
	sealed, err := a.keys.Seal(nil, env.BoundAAD(nil, "b", raw.channel), body)
	env.KeyID = sealed.KeyID
	if err != nil {
		t.Fatal(err)
	}
	env.Salt, env.Nonce, env.Body = sealed.Salt, sealed.Nonce, sealed.Ciphertext
	eb, _ := wire.EncodeEnvelope(env)
	raw.write(t, appendFrame(nil, eb))
	reply := raw.readReply(t)
	if reply.Type != wire.TypeError || reply.ReplyTo != env.ID {
		t.Fatalf("malformed body: want error reply to %d, got %s reply to %d", env.ID, reply.Type, reply.ReplyTo)
	}
	plain, err := a.keys.Open(reply.KeyID, reply.Salt, reply.Nonce, reply.BoundAAD(nil, "a", raw.channel), reply.Body, nil)
	if err != nil {
		t.Fatalf("open error reply: %v", err)
	}
	var we wire.Error
	if err := wire.Unmarshal(plain, &we); err != nil || we.Code != wire.CodeMalformed {
		t.Fatalf("malformed body: want malformed code, got %v (%v)", we.Code, err)
	}
	// An announced frame over the cap: the stream is reset with a typed error.
	hdr := []byte{0x7f, 0xff, 0xff, 0xff}
	raw.write(t, hdr)
	reply = raw.readReply(t)
	if reply.Flags&wire.FlagPlainError == 0 {
		t.Fatalf("oversized frame: want plain error reply, got flags %v", reply.Flags)
	}
	var big wire.Error
	if err := wire.Unmarshal(reply.Body, &big); err != nil || big.Code != wire.CodeTooLarge {
		t.Fatalf("oversized frame: want too_large, got %v (%v)", big.Code, err)
	}
	s := b.Stats()
	if s.Malformed < 2 || s.TooLarge != 1 {
		t.Fatalf("counters: malformed %d (want >= 2), too large %d (want 1)", s.Malformed, s.TooLarge)
	}
	if err := ping(ctx, a, b.Addr()); err != nil {
		t.Fatalf("node stopped serving after bad input: %v", err)
	}
}

// TestBreakerOpensOnDeadPeerAndClosesOnReturn: calls to a peer that died
// fail until the breaker opens and fails them fast; when the peer returns a
// half-open probe closes it. Every step waits for a state the transport
// shows (a call's error, Stats), not for a time: the dial keeps the
// production timeout, since a handshake on a loaded machine takes what it
// takes; the dead-peer calls fail at their own short deadline, which is what
// trips the breaker.
func TestBreakerOpensOnDeadPeerAndClosesOnReturn(t *testing.T) {
	fast := func(c *Config) {
		c.Breaker = BreakerConfig{ConsecutiveFailures: 3, OpenFor: 300 * time.Millisecond}
	}
	a := newNode(t, "a", nodeOpts{tweak: fast})
	b := newNode(t, "b", nodeOpts{})
	echo(b, nil)
	addr := b.Addr()
	ctx := context.Background()
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error { return ping(ctx, a, addr) })
	b.Close()

	call := func(d time.Duration) error {
		cctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return ping(cctx, a, addr)
	}
	// Open means fast: no dial, no wait. How fast is a timing, only logged.
	var failFast time.Duration
	testutil.Eventually(t, 30*time.Second, time.Millisecond, func() error {
		start := time.Now()
		if err := call(400 * time.Millisecond); !errors.Is(err, ErrCircuitOpen) {
			return fmt.Errorf("breaker not open yet: %v", err)
		}
		failFast = time.Since(start)
		return nil
	})
	if failFast > 50*time.Millisecond {
		t.Logf("open breaker took %s to fail (expected near zero)", failFast)
	}
	// Open or half-open, it stays visible while the peer is away: no probe
	// can close it.
	if len(a.Stats().Breakers) == 0 {
		t.Fatalf("open breaker not visible in stats")
	}

	// The peer returns on the same address; a half-open probe succeeds. The
	// probe has room for a handshake on a busy machine.
	b2 := newNode(t, "b", nodeOpts{listen: addr})
	echo(b2, nil)
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error { return call(5 * time.Second) })
	if s := a.Stats(); len(s.Breakers) != 0 || s.BreakerChanges < 3 {
		t.Fatalf("breaker should be closed after recovery with >= 3 transitions: %+v", s)
	}
}

// TestBreakerIgnoresCallsThatGiveUpDuringADial: calls whose deadline is shorter
// than a dial (an election message lives two ticks; a handshake on a
// starved host takes longer) give up while the dial is still under way.
// That is not evidence against the peer, so however many there are, the
// breaker stays closed and the next call still tries. The peer here is a
// UDP socket that swallows every packet, so the dial never ends within the
// test.
func TestBreakerIgnoresCallsThatGiveUpDuringADial(t *testing.T) {
	hole, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hole.Close() })
	a := newNode(t, "a", nodeOpts{tweak: func(c *Config) {
		c.Breaker = BreakerConfig{ConsecutiveFailures: 2, OpenFor: time.Minute}
		c.DialTimeout = time.Minute
	}})
	for i := range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := a.Send(ctx, hole.LocalAddr().String(), &wire.Ping{Seq: uint64(i)})
		cancel()
		if !errors.Is(err, ErrNotDelivered) || errors.Is(err, ErrCircuitOpen) {
			t.Fatalf("send %d while the dial is under way: want not delivered (breaker closed), got %v", i, err)
		}
	}
	if b := a.Stats().Breakers; len(b) != 0 {
		t.Fatalf("breaker left its closed state for calls that only outlived a dial: %+v", b)
	}
}

func TestConcurrentCallsShareStreams(t *testing.T) {
	a := newNode(t, "a", nodeOpts{})
	b := newNode(t, "b", nodeOpts{})
	echo(b, nil)
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				payload := bytes.Repeat([]byte{byte(g)}, 100+i)
				resp, err := a.Call(ctx, b.Addr(), &wire.Ping{Seq: uint64(g*1000 + i), Payload: payload})
				if err != nil {
					t.Errorf("call: %v", err)
					return
				}
				p := resp.(*wire.Ping)
				if p.Seq != uint64(g*1000+i) || !bytes.Equal(p.Payload, payload) {
					t.Errorf("reply mixed up: seq %d", p.Seq)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	a.mu.Lock()
	conns := len(a.peers)
	a.mu.Unlock()
	if conns != 1 {
		t.Fatalf("want one connection per peer, have %d", conns)
	}
}

func TestCloseIsGracefulAndIdempotent(t *testing.T) {
	a := newNode(t, "a", nodeOpts{})
	b := newNode(t, "b", nodeOpts{})
	release := make(chan struct{})
	started := make(chan struct{})
	b.Handle(wire.TypePing, func(ctx context.Context, from Peer, msg wire.Message) (wire.Message, error) {
		close(started)
		<-release
		return msg, nil
	})
	done := make(chan error, 1)
	go func() { done <- ping(context.Background(), a, b.Addr()) }()
	<-started
	closed := make(chan struct{})
	go func() { b.Close(); close(closed) }()
	// In-flight work finishes before Close returns.
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("in-flight call during graceful close: %v", err)
	}
	<-closed
	if err := b.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, err := b.Call(context.Background(), a.Addr(), &wire.Ping{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("call on closed transport: want ErrClosed, got %v", err)
	}
}

func securityKeyring(secret string) (*security.Keyring, error) {
	return security.NewKeyring(secret, "")
}

// A peer that crashed and restarted on the same address answers packets of
// the connection it lost with a stateless reset (its key derives from the
// secret and its node id), so one-way messages to it flow again at once
// rather than vanishing into the dead connection until the idle timeout.
func TestRestartedPeerResetsTheDeadConnection(t *testing.T) {
	long := func(c *Config) { c.IdleTimeout = time.Minute }
	a := newNode(t, "a", nodeOpts{tweak: long})
	b := newNode(t, "b", nodeOpts{listen: "127.0.0.1:0", tweak: long})
	addr := b.Addr()
	var got atomic.Int64
	count := func(context.Context, Peer, wire.Message) (wire.Message, error) { got.Add(1); return nil, nil }
	b.Handle(wire.TypePing, count)
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
		a.Send(context.Background(), addr, &wire.Ping{Seq: 1})
		if got.Load() == 0 {
			return errors.New("first ping not delivered")
		}
		return nil
	})
	// A crash: the socket goes away without a word to the peer.
	b.udp.Close()
	b2 := newNode(t, "b", nodeOpts{listen: addr, tweak: long})
	var got2 atomic.Int64
	b2.Handle(wire.TypePing, func(context.Context, Peer, wire.Message) (wire.Message, error) { got2.Add(1); return nil, nil })
	start := time.Now()
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		a.Send(ctx, addr, &wire.Ping{Seq: 2})
		if got2.Load() == 0 {
			return errors.New("no ping reached the restarted peer")
		}
		return nil
	})
	t.Logf("one-way messages reach the restarted peer after %s (idle timeout %s)", time.Since(start).Round(time.Millisecond), time.Minute)
}

// A reply over the size cap is a typed error the caller sees at once, not
// a silent timeout that drops the connection; so is a request over it.
func TestOversizedReplyIsATypedError(t *testing.T) {
	a := newNode(t, "a", nodeOpts{tweak: func(c *Config) { c.CallTimeout = time.Minute }})
	b := newNode(t, "b", nodeOpts{})
	big := make([]byte, wire.MaxMessageSize+1)
	b.Handle(wire.TypePing, func(ctx context.Context, from Peer, msg wire.Message) (wire.Message, error) {
		return &wire.Ping{Payload: big}, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := a.Call(ctx, b.Addr(), &wire.Ping{Seq: 1})
	if wire.CodeOf(err) != wire.CodeTooLarge {
		t.Fatalf("oversized reply: %v, want a too_large error", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the caller waited out its deadline")
	}
	if _, err := a.Call(ctx, b.Addr(), &wire.Ping{Payload: big}); wire.CodeOf(err) != wire.CodeTooLarge {
		t.Fatalf("oversized request: %v, want a too_large error", err)
	}
}

// A one-way send to a peer that crashed returns by its deadline even when
// the stream's flow-control window is full: the write is given up and the
// connection dropped, rather than blocking until QUIC's idle timeout.
func TestSendToCrashedPeerEndsByItsDeadline(t *testing.T) {
	long := func(c *Config) { c.IdleTimeout = 2 * time.Minute }
	a := newNode(t, "a", nodeOpts{tweak: long})
	b := newNode(t, "b", nodeOpts{listen: "127.0.0.1:0", tweak: long})
	addr := b.Addr()
	var got atomic.Int64
	b.Handle(wire.TypePing, func(context.Context, Peer, wire.Message) (wire.Message, error) { got.Add(1); return nil, nil })
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
		a.Send(context.Background(), addr, &wire.Ping{Seq: 1})
		if got.Load() == 0 {
			return errors.New("first ping not delivered")
		}
		return nil
	})
	b.udp.Close() // a crash: no word to the peer, and nobody reads
	payload := make([]byte, 1<<20)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 16 {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			a.Send(ctx, addr, &wire.Ping{Seq: uint64(i + 2), Payload: payload})
			cancel()
		}
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("sends to a crashed peer were still blocked after 60 s (idle timeout 2 min): writes ignore their deadlines")
	}
}

// Message and byte counters are kept in shards, one per stream; Stats adds
// them up exactly, whichever streams and goroutines the messages took.
func TestStatsCountEveryMessageAcrossStreams(t *testing.T) {
	a := newNode(t, "a", nodeOpts{})
	b := newNode(t, "b", nodeOpts{})
	echo(b, nil)
	const callers, calls = 8, 25
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				if _, err := a.Call(context.Background(), b.Addr(), &wire.Ping{Seq: uint64(g*calls + i)}); err != nil {
					t.Errorf("call: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// A frame is counted out once its write returned, and the reader at
	// the other end may have it (and a's caller its reply) before b's
	// writer gets the CPU back to count it: wait for the counts to settle.
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		sa, sb := a.Stats(), b.Stats()
		if sa.MessagesOut != callers*calls || sa.MessagesIn != callers*calls || sb.MessagesIn != callers*calls || sb.MessagesOut != callers*calls {
			return fmt.Errorf("a out %d in %d, b in %d out %d; want %d each", sa.MessagesOut, sa.MessagesIn, sb.MessagesIn, sb.MessagesOut, callers*calls)
		}
		// b also counts the bytes of a's hello.
		if sa.BytesOut == 0 || sb.BytesIn < sa.BytesOut || sb.BytesOut != sa.BytesIn {
			return fmt.Errorf("bytes: a out %d in %d, b in %d out %d", sa.BytesOut, sa.BytesIn, sb.BytesIn, sb.BytesOut)
		}
		return nil
	})
}

// stallingPair is a to b over one stream, connected, where b answers a
// Ping with Seq 1 only once unblock is called: that call holds b's only
// handler slot, so b stops reading the stream and a's writes back up.
// unblock runs before the transports close (they wait for handlers).
// Calls without a deadline get a CallTimeout of minutes: on a machine busy
// with builds these tests take most of a minute with -race, and a call the
// test expects to succeed must not end at a tight guess of how long. b's
// replay window is as long: it takes a request only within its window of
// the request's sending, and with both cores busy the 8 MiB frames queued
// here have taken over a minute to cross (measured: 20 s each), so with the
// default 60 s b refused them as stale.
func stallingPair(t *testing.T) (a, b *QUIC, unblock func()) {
	t.Helper()
	const patience = 3 * time.Minute
	a = newNode(t, "a", nodeOpts{tweak: func(c *Config) { c.StreamsPerPeer = 1; c.CallTimeout = patience }})
	b = newNode(t, "b", nodeOpts{tweak: func(c *Config) { c.MaxInflight = 1; c.Replay.Window = patience }})
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock = func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	b.Handle(wire.TypePing, func(ctx context.Context, _ Peer, msg wire.Message) (wire.Message, error) {
		if msg.(*wire.Ping).Seq == 1 {
			<-release
		}
		return msg, nil
	})
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error { return ping(context.Background(), a, b.Addr()) })
	return a, b, unblock
}

// TestCallerGivingUpInTheWriteQueueKeepsTheConnection: a caller whose
// context ends while its frame waits behind another caller's write has
// written nothing of its own (its frame is copied into the batch, and goes
// out whole with it), so it must not take the stream or the connection down
// with it. It used to: a manager's quorum round cancels the straggling peer's
// request once a majority answered, and under load that request was often
// still queued, so every such round closed the connection to that peer, failed
// every call in flight on it and, five times over, opened its breaker: job
// intake then refused jobs with "no quorum" on a quiet machine.
func TestCallerGivingUpInTheWriteQueueKeepsTheConnection(t *testing.T) {
	a, b, unblock := stallingPair(t)
	ctx := context.Background()

	errs := make(chan error, 8)
	call := func(ctx context.Context, seq uint64, size int) {
		_, err := a.Call(ctx, b.Addr(), &wire.Ping{Seq: seq, Payload: make([]byte, size)})
		errs <- err
	}
	go call(ctx, 1, 10)
	// Enough to fill b's stream window while it reads nothing: one of these
	// writes blocks in QUIC, the others queue behind it.
	for seq := uint64(2); seq < 6; seq++ {
		go call(ctx, seq, 8<<20)
	}
	w := func() *streamWriter {
		a.mu.Lock()
		defer a.mu.Unlock()
		p := a.peers[b.Addr()]
		if p == nil {
			return nil
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if len(p.streams) == 0 || p.streams[0] == nil {
			return nil
		}
		return p.streams[0].w
	}
	queued := func() int {
		sw := w()
		if sw == nil {
			return 0
		}
		sw.mu.Lock()
		defer sw.mu.Unlock()
		if !sw.writing || sw.pending == nil {
			return 0
		}
		return len(sw.pending.buf)
	}
	testutil.Eventually(t, 30*time.Second, 10*time.Millisecond, func() error {
		if queued() < 8<<20 {
			return errors.New("no write blocked with another queued behind it yet")
		}
		return nil
	})
	before := queued()
	gctx, giveUp := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		_, err := a.Call(gctx, b.Addr(), &wire.Ping{Seq: 6, Payload: make([]byte, 10)})
		gaveUp <- err
	}()
	testutil.Eventually(t, 30*time.Second, 5*time.Millisecond, func() error {
		if queued() <= before {
			return errors.New("the small call is not queued yet")
		}
		return nil
	})
	giveUp()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("the call that gave up: %v, want context.Canceled", err)
	}
	if n := a.Stats().LeftWriteQueue; n != 1 {
		t.Fatalf("LeftWriteQueue = %d after the queued call gave up, want 1", n)
	}
	// A queued caller whose deadline passes leaves the same way, and its
	// deadline does not become the batch's: the batch still goes out. On a
	// busy machine a short deadline may pass before the call even reaches
	// the queue (it then fails without queueing, which proves nothing), so
	// the deadline doubles until the transport counts a caller that left
	// the queue: the test waits for that, not for a guess at the clock.
	if before = queued(); before < 8<<20 {
		t.Fatalf("%d bytes queued: the large calls should still wait behind the blocked write", before)
	}
	for d := 250 * time.Millisecond; ; d *= 2 {
		dctx, cancel := context.WithTimeout(ctx, d)
		_, err := a.Call(dctx, b.Addr(), &wire.Ping{Seq: 7, Payload: make([]byte, 10)})
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the call whose deadline passed: %v, want context.DeadlineExceeded", err)
		}
		if a.Stats().LeftWriteQueue == 2 {
			break
		}
		if d > time.Minute {
			t.Fatalf("no call with a deadline of up to %s reached the write queue before it passed", d)
		}
		t.Logf("a call with a %s deadline timed out before it was queued; trying a longer one", d)
	}
	unblock()
	for range 5 {
		if err := <-errs; err != nil {
			t.Fatalf("a call queued beside the one that gave up: %v", err)
		}
	}
	if s := a.Stats(); len(s.Breakers) != 0 {
		t.Fatalf("breakers after one caller gave up: %+v", s.Breakers)
	}
}

// A write that put part of its frame on the stream before failing leaves
// the stream unusable: the peer would read the rest of the next frame as
// the tail of this one. The writer marks it broken and refuses every later
// frame at once. A write that failed before its first byte (its deadline
// had already passed) leaves nothing behind, and the stream stays usable.
func TestOnlyAPartialWriteBreaksTheStream(t *testing.T) {
	a, b, _ := stallingPair(t) // b stays stalled until the test ends
	ctx := context.Background()
	go func() { _, _ = a.Call(ctx, b.Addr(), &wire.Ping{Seq: 1}) }()
	var sw *streamWriter
	testutil.Eventually(t, 30*time.Second, 10*time.Millisecond, func() error {
		a.mu.Lock()
		defer a.mu.Unlock()
		if p := a.peers[b.Addr()]; p != nil {
			p.mu.Lock()
			defer p.mu.Unlock()
			if len(p.streams) > 0 && p.streams[0] != nil {
				sw = p.streams[0].w
				return nil
			}
		}
		return errors.New("no stream to b yet")
	})

	past, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	pastBy, _ := past.Deadline()
	if err := sw.write(past, pastBy, []byte("nothing of this is written")); err == nil {
		t.Fatal("a write whose deadline had passed succeeded")
	}
	sw.mu.Lock()
	broken := sw.broken
	sw.mu.Unlock()
	if broken != nil {
		t.Fatalf("a write that sent no byte marked the stream broken: %v", broken)
	}

	// More than b's stream window, which b no longer drains: the first
	// part is accepted, the rest blocks until the deadline. On a busy
	// machine QUIC may take no byte of it before a short deadline passes;
	// that write failed before its first byte, which must leave the
	// stream usable (as above), so the deadline doubles until a write
	// failed part way: the test waits for that, not for a guess at the
	// clock.
	for d := 300 * time.Millisecond; ; d *= 2 {
		short, cancel := context.WithTimeout(ctx, d)
		shortBy, _ := short.Deadline()
		err := sw.write(short, shortBy, make([]byte, 32<<20))
		cancel()
		if err == nil {
			t.Fatal("a 32 MiB write to a peer that reads nothing succeeded")
		}
		sw.mu.Lock()
		broken = sw.broken
		sw.mu.Unlock()
		if broken != nil {
			break
		}
		if d > time.Minute {
			t.Fatalf("no write of up to %s put a byte on the stream (last: %v)", d, err)
		}
		t.Logf("a write with a %s deadline failed before its first byte (%v); the stream stays usable, trying a longer one", d, err)
	}
	if err := sw.write(ctx, time.Time{}, []byte("x")); err == nil || err.Error() != broken.Error() {
		t.Fatalf("a write after a partial one: %v, want the stream's error %v at once", err, broken)
	}
}

// A peer restarted on the same address knows nothing of the connection to
// its old process: a call on that connection is lost to a stateless reset.
// Once the caller has been told the peer died (Disconnect), its first call
// to the new process dials afresh and succeeds. (Without the Disconnect
// this test fails: "connection lost: received a stateless reset".)
func TestDisconnectRedialsARestartedPeer(t *testing.T) {
	a := newNode(t, "a", nodeOpts{})
	b := newNode(t, "b", nodeOpts{listen: "127.0.0.1:0"})
	echo(b, nil)
	addr := b.Addr()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := a.Call(ctx, addr, &wire.Ping{Seq: 1}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	b2 := newNode(t, "b", nodeOpts{listen: addr})
	echo(b2, nil)
	a.Disconnect(addr)
	if _, err := a.Call(ctx, addr, &wire.Ping{Seq: 2}); err != nil {
		t.Fatalf("first call to the restarted peer: %v", err)
	}
}

// A call whose ctx has no deadline gets CallTimeout without a context or
// timer of its own: the expiry sweep fails it once the deadline passes, as
// context.DeadlineExceeded, and a stream on which nothing came back is
// dropped so the next call redials.
func TestCallWithoutDeadlineEndsAtCallTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	a := newNode(t, "a", nodeOpts{tweak: func(c *Config) { c.CallTimeout = timeout; c.StreamsPerPeer = 1 }})
	b := newNode(t, "b", nodeOpts{})
	release := make(chan struct{})
	var answer atomic.Bool
	b.Handle(wire.TypePing, func(ctx context.Context, _ Peer, msg wire.Message) (wire.Message, error) {
		if answer.Load() {
			return msg, nil
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, errors.New("released")
	})
	defer close(release)
	if err := ping(context.Background(), a, b.Addr()); err == nil {
		t.Fatal("a call the peer never answers succeeded")
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a call the peer never answers: %v, want context.DeadlineExceeded", err)
	}
	a.mu.Lock()
	p := a.peers[b.Addr()]
	a.mu.Unlock()
	p.mu.Lock()
	dropped := p.conn == nil
	p.mu.Unlock()
	if !dropped {
		t.Fatal("the connection on which nothing came back was kept")
	}
	answer.Store(true)
	if err := ping(context.Background(), a, b.Addr()); err != nil {
		t.Fatalf("the call after the timeout: %v", err)
	}
}

// Handlers run on goroutines kept between requests: a fresh goroutine per
// request paid for growing its stack on every one. Sequential calls find a
// parked handler almost every time. (With a goroutine per request every
// call runs on a new one: 200 of 200.)
func TestSequentialRequestsReuseHandlerGoroutines(t *testing.T) {
	a := newNode(t, "a", nodeOpts{})
	b := newNode(t, "b", nodeOpts{})
	seen := map[string]bool{}
	var mu sync.Mutex
	b.Handle(wire.TypePing, func(_ context.Context, _ Peer, msg wire.Message) (wire.Message, error) {
		buf := make([]byte, 64)
		id, _, _ := strings.Cut(strings.TrimPrefix(string(buf[:runtime.Stack(buf, false)]), "goroutine "), " ")
		mu.Lock()
		seen[id] = true
		mu.Unlock()
		return msg, nil
	})
	const calls = 200
	for range calls {
		if err := ping(context.Background(), a, b.Addr()); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// A request can arrive before the last handler has parked, and then
	// starts one more; once two are kept, one of them is always parked.
	if len(seen) > 8 {
		t.Fatalf("%d sequential calls ran on %d handler goroutines, want a few", calls, len(seen))
	}
	t.Logf("%d sequential calls ran on %d handler goroutines", calls, len(seen))
}

// A call without a deadline waiting for a dial gives up at CallTimeout,
// not at the dial's own, longer timeout.
func TestCallWithoutDeadlineWaitsForADialOnlyUntilCallTimeout(t *testing.T) {
	a := newNode(t, "a", nodeOpts{tweak: func(c *Config) { c.CallTimeout = 300 * time.Millisecond; c.DialTimeout = 30 * time.Second }})
	silent, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close() // a socket that reads nothing: the handshake never completes
	start := time.Now()
	err = ping(context.Background(), a, silent.LocalAddr().String())
	if !errors.Is(err, ErrNotDelivered) || !strings.Contains(err.Error(), context.DeadlineExceeded.Error()) {
		t.Fatalf("a call to a peer that never completes the handshake: %v, want not delivered, deadline exceeded", err)
	}
	if took := time.Since(start); took >= 20*time.Second {
		t.Fatalf("the call waited %s, as long as the dial (30 s), not its CallTimeout", took)
	}
}

// A request that reaches its receiver outside the replay window (it spent
// longer than that in flight, behind large frames on a congested path, or
// its sender's clock is off) is refused with an answer, not dropped in
// silence: its caller hears at once instead of waiting out its deadline
// (CallTimeout), which is what made queued calls of
// TestCallerGivingUpInTheWriteQueueKeepsTheConnection hang for minutes on
// a loaded machine. Here the receiver's clock runs two minutes ahead.
func TestStaleRequestIsAnsweredNotDropped(t *testing.T) {
	a := newNode(t, "a", nodeOpts{})
	b := newNode(t, "b", nodeOpts{tweak: func(c *Config) {
		c.Replay.Now = func() time.Time { return time.Now().Add(2 * time.Minute) }
	}})
	echo(b, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := a.Call(ctx, b.Addr(), &wire.Ping{Seq: 1})
	if wire.CodeOf(err) != wire.CodeUnavailable || !strings.Contains(err.Error(), "outside") {
		t.Fatalf("a request outside the receiver's replay window: %v, want unavailable, saying why", err)
	}
	if n := b.Stats().ReplaysDropped; n != 1 {
		t.Fatalf("ReplaysDropped = %d, want 1", n)
	}
}

// TestReplyToACallerThatStopsReadingIsBounded: a reply's write blocks while
// the caller's flow-control window is shut. A caller that sends a request
// and never reads again (paused, wedged or hostile) used to hold the
// handler's slot for good, and with every slot held the node stopped
// reading requests from anyone. The reply now gives up at ReplyTimeout and
// resets the stream, and the node serves others again.
func TestReplyToACallerThatStopsReadingIsBounded(t *testing.T) {
	b := newNode(t, "b", nodeOpts{tweak: func(c *Config) {
		c.MaxInflight = 1
		c.ReplyTimeout = time.Second
	}})
	b.Handle(wire.TypePing, func(ctx context.Context, _ Peer, msg wire.Message) (wire.Message, error) {
		return msg, nil
	})
	a := newNode(t, "a", nodeOpts{})
	raw := dialRaw(t, b.Addr(), a)
	// An echo far larger than the stream's initial window: the reply's
	// write blocks once the window is full, and the raw caller reads nothing.
	_, req := raw.sealFor(t, &wire.Ping{Seq: 1, Payload: make([]byte, 8<<20)})
	raw.write(t, req)
	// The reply's write blocks once the window is full; after ReplyTimeout
	// b gives up on it. Waited for by b's own count, since on a loaded
	// machine the 8 MiB request alone may take seconds to arrive.
	testutil.Eventually(t, 90*time.Second, 20*time.Millisecond, func() error {
		if st := b.Stats(); st.RepliesStalled < 1 {
			return fmt.Errorf("no reply stalled yet (stats %+v)", st)
		}
		return nil
	})

	// Another node's call needs the one handler slot the stalled reply held.
	c := newNode(t, "c", nodeOpts{})
	testutil.Eventually(t, 60*time.Second, 50*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return ping(ctx, c, b.Addr())
	})

	// The stalled caller's stream was reset rather than left holding part of
	// a frame.
	raw.s.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err := io.Copy(io.Discard, raw.s)
	var se *quic.StreamError
	if !errors.As(err, &se) || se.ErrorCode != codeReplyStalled {
		t.Fatalf("stalled caller's stream ended with %v, want a reset with code %d (b's stats %+v)", err, codeReplyStalled, b.Stats())
	}
}
