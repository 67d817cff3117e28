package transport

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"tempest/internal/testutil"
	"tempest/wire"
)

// A peer without the secret can announce huge frames on many streams, but
// the node reads nothing of them before a hello: its connection buffers at
// most the pre-auth window, and is closed as soon as a stream beside the
// hello's shows up.
func TestUnauthenticatedConnectionIsBounded(t *testing.T) {
	const window = 64 << 10
	b := newNode(t, "b", nodeOpts{tweak: func(c *Config) {
		c.Limits.HelloTimeout = 10 * time.Second
		c.Limits.PreAuthWindow = window
	}})
	echo(b, nil)
	conn := dialRawConn(t, b.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	// The hello stream trickles two bytes of a length and stops.
	hs, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hs.Write([]byte{0, 0}); err != nil {
		t.Fatal(err)
	}
	var written atomic.Int64
	var wg sync.WaitGroup
	junk := make([]byte, 1<<20)
	for i := 0; i < 20; i++ {
		s, err := conn.OpenStreamSync(ctx)
		if err != nil {
			// The node may already have seen an earlier stream beside the
			// hello's and closed the connection; that refusal is checked
			// below, anything else is a failure here.
			var ae *quic.ApplicationError
			if errors.As(err, &ae) && ae.Remote && ae.ErrorCode == codeHelloRefused {
				break
			}
			t.Fatalf("stream %d: %v", i, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			hdr := binary.BigEndian.AppendUint32(nil, maxFrameLen)
			s.SetWriteDeadline(time.Now().Add(3 * time.Second))
			if n, err := s.Write(hdr); err == nil {
				written.Add(int64(n))
			}
			for j := 0; j < 4; j++ {
				n, err := s.Write(junk)
				written.Add(int64(n))
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	// Everything the 20 streams got onto the wire fits in the window the
	// node granted before the hello (plus a packet's slack); on a node that
	// read them, 80 MiB would have gone through.
	t.Logf("20 streams announcing %d-byte frames got %d bytes through before the hello timeout", maxFrameLen, written.Load())
	if n := written.Load(); n > window+64<<10 {
		t.Fatalf("an unauthenticated peer got %d bytes accepted, window is %d", n, window)
	}
	<-conn.Context().Done()
	var ae *quic.ApplicationError
	if err := context.Cause(conn.Context()); !errors.As(err, &ae) || ae.ErrorCode != codeHelloRefused {
		t.Fatalf("want the connection refused, got %v", err)
	}
	if s := b.Stats(); s.MessagesIn != 0 || s.Malformed != 1 {
		t.Fatalf("messages in %d (want 0), malformed %d (want 1) from a peer that never said hello", s.MessagesIn, s.Malformed)
	}
}

// A hello that never completes is cut off at HelloTimeout and counted.
func TestSlowHelloTimesOut(t *testing.T) {
	b := newNode(t, "b", nodeOpts{tweak: func(c *Config) { c.Limits.HelloTimeout = 500 * time.Millisecond }})
	conn := dialRawConn(t, b.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	hs, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hs.Write([]byte{0, 0, 0, 100}) // a hello of 100 bytes is coming...
	for i := 0; conn.Context().Err() == nil && i < 50; i++ {
		hs.Write([]byte{0xa3}) // ...a byte at a time
		time.Sleep(50 * time.Millisecond)
	}
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
		if n := b.Stats().HelloTimeouts; n != 1 {
			return fmt.Errorf("hello timeouts %d, want 1", n)
		}
		if conn.Context().Err() == nil {
			return errors.New("connection still open")
		}
		return nil
	})
}

// A hello announcing more than wire.MaxHelloSize is refused before it is
// read, and counted.
func TestOversizedHelloIsRefused(t *testing.T) {
	b := newNode(t, "b", nodeOpts{})
	conn := dialRawConn(t, b.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	s, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Write(binary.BigEndian.AppendUint32(nil, 10<<20))
	<-conn.Context().Done()
	var ae *quic.ApplicationError
	if err := context.Cause(conn.Context()); !errors.As(err, &ae) || ae.ErrorCode != codeHelloRefused {
		t.Fatalf("want the connection closed with hello refused, got %v", err)
	}
	if n := b.Stats().TooLarge; n != 1 {
		t.Fatalf("too large %d, want 1", n)
	}
}

// Connections awaiting their hello are capped per source IP; other sources
// are served meanwhile, and the refusals are counted.
func TestPendingConnectionsAreCappedPerIP(t *testing.T) {
	b := newNode(t, "b", nodeOpts{tweak: func(c *Config) {
		c.Limits.MaxPendingPerIP = 2
		c.Limits.HelloTimeout = 20 * time.Second
	}})
	echo(b, nil)
	held := []*quic.Conn{dialRawConn(t, b.Addr()), dialRawConn(t, b.Addr())}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := quic.DialAddr(ctx, b.Addr(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{alpn}}, nil); err == nil {
		t.Fatal("a third pending connection from one IP was admitted")
	}
	if n := b.Stats().ConnsRefused; n == 0 {
		t.Fatal("refused connection not counted")
	}
	other := newNode(t, "other", nodeOpts{listen: "127.0.0.2:0"})
	if err := ping(ctx, other, b.Addr()); err != nil {
		t.Fatalf("another source refused while one IP is at its cap: %v", err)
	}
	for _, c := range held {
		c.CloseWithError(0, "")
	}
	same := newNode(t, "same", nodeOpts{})
	testutil.Eventually(t, 5*time.Second, 50*time.Millisecond, func() error {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
		defer ccancel()
		return ping(cctx, same, b.Addr())
	})
}

// New connections are rate-limited by source IP: a sender rotating source
// ports (a new socket per dial) shares one bucket.
func TestConnectionRateIsKeyedByIPNotPort(t *testing.T) {
	b := newNode(t, "b", nodeOpts{tweak: func(c *Config) {
		c.Limits.ConnsPerSecondPerIP = 0.01
		c.Limits.ConnBurstPerIP = 3
	}})
	refused := 0
	for i := 0; i < 6; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := quic.DialAddr(ctx, b.Addr(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{alpn}}, nil)
		cancel()
		if err != nil {
			refused++
			continue
		}
		conn.CloseWithError(0, "")
	}
	if refused != 3 {
		t.Fatalf("%d of 6 dials from fresh ports refused, want 3 (burst 3 per IP)", refused)
	}
	// A refused client retransmits its first packet, and each is refused
	// and counted again.
	if n := b.Stats().ConnsRefused; n < 3 {
		t.Fatalf("conns refused %d, want at least 3", n)
	}
}

// An envelope opens only for the node it was sealed for, on the connection
// it was sealed on, from the node the connection's hello proved: a captured
// frame is refused on another connection, at another node, and under
// another sender's name.
func TestEnvelopesAreBoundToRecipientAndConnection(t *testing.T) {
	var served atomic.Int64
	count := func(ctx context.Context, from Peer, msg wire.Message) (wire.Message, error) {
		served.Add(1)
		return msg, nil
	}
	b := newNode(t, "b", nodeOpts{})
	c := newNode(t, "c", nodeOpts{})
	b.Handle(wire.TypePing, count)
	c.Handle(wire.TypePing, count)
	a := newNode(t, "a", nodeOpts{})
	x := newNode(t, "x", nodeOpts{})

	toB := dialRaw(t, b.Addr(), a)
	_, captured := toB.sealFor(t, &wire.Ping{Seq: 1})

	// Same node, a new connection (as after a reconnect or a restart).
	again := dialRaw(t, b.Addr(), a)
	again.write(t, captured)
	// Another node.
	toC := dialRaw(t, c.Addr(), a)
	toC.write(t, captured)
	// A connection whose hello proved x, carrying a's envelope.
	asX := dialRaw(t, b.Addr(), x)
	asX.write(t, captured)

	for _, r := range []*rawClient{again, toC, asX} {
		if env := r.readReply(t); env.Flags&wire.FlagPlainError == 0 {
			t.Fatalf("replayed envelope answered with %s, want a plain unauthenticated error", env.Type)
		}
	}
	if fb, fc := b.Stats().AuthFailures, c.Stats().AuthFailures; fb != 2 || fc != 1 {
		t.Fatalf("auth failures b=%d c=%d, want 2 and 1", fb, fc)
	}
	if served.Load() != 0 {
		t.Fatalf("a captured envelope was served %d times", served.Load())
	}
	// The original connection still works.
	toB.write(t, captured)
	if env := toB.readReply(t); env.Type != wire.TypePing {
		t.Fatalf("genuine delivery: got %s", env.Type)
	}
}
