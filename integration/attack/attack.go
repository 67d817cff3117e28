// Package attack is a hostile peer for the integration tests: it speaks raw
// QUIC with the project's ALPN to real node binaries, without the secret
// (floods, huge and slow frames, garbage, a wrong key) or with it, as an
// insider replaying what it captured. It implements the connection hello
// itself, from the documented format, rather than borrowing the
// transport's code, so a test of the node is not a test of the node's own
// client against itself.
package attack

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"tempest/security"
	"tempest/wire"
)

// ALPN is the protocol name the nodes speak.
const ALPN = "tempest/1"

// The hello's transcript labels and exporter label (docs/security.md).
const (
	exporterLabel = "EXPORTER-tempest-channel-v1"
	helloDialer   = "tempest hello v1 dialer"
	helloListener = "tempest hello v1 listener"
)

// Stats counts what an attack did.
type Stats struct {
	Conns     atomic.Int64 // connections whose QUIC handshake completed
	Refused   atomic.Int64 // dials refused or failed
	Streams   atomic.Int64
	BytesSent atomic.Int64
	Closed    atomic.Int64 // connections the node closed on us
}

func (s *Stats) String() string {
	return fmt.Sprintf("conns %d, refused %d, streams %d, sent %d B, closed by node %d",
		s.Conns.Load(), s.Refused.Load(), s.Streams.Load(), s.BytesSent.Load(), s.Closed.Load())
}

// Attacker dials from Source, an IP on this host ("127.0.0.2"), so the
// node's per-IP limits meet the attacker and not the cluster's own nodes.
type Attacker struct {
	Source string
	Stats  Stats
}

// Dial opens one QUIC connection from a fresh UDP port of the source IP.
func (a *Attacker) Dial(ctx context.Context, addr string) (*quic.Conn, error) {
	raddr, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(a.Source)})
	if err != nil {
		return nil, err
	}
	tr := &quic.Transport{Conn: udp}
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := tr.Dial(dctx, raddr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{ALPN}}, &quic.Config{MaxIdleTimeout: time.Minute, KeepAlivePeriod: 5 * time.Second})
	if err != nil {
		a.Stats.Refused.Add(1)
		tr.Close()
		udp.Close()
		return nil, err
	}
	a.Stats.Conns.Add(1)
	context.AfterFunc(conn.Context(), func() {
		tr.Close()
		udp.Close()
	})
	return conn, nil
}

// run starts n copies of f, each on its own connection, and waits for them
// to end with ctx.
func (a *Attacker) run(ctx context.Context, addr string, n int, f func(ctx context.Context, conn *quic.Conn)) {
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				conn, err := a.Dial(ctx, addr)
				if err != nil {
					sleep(ctx, 100*time.Millisecond)
					continue
				}
				f(ctx, conn)
				if conn.Context().Err() != nil && ctx.Err() == nil {
					a.Stats.Closed.Add(1)
				}
				conn.CloseWithError(0, "")
			}
		}()
	}
	wg.Wait()
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// wait blocks until ctx ends or the node closes conn.
func wait(ctx context.Context, conn *quic.Conn) {
	select {
	case <-ctx.Done():
	case <-conn.Context().Done():
	}
}

// ConnFlood keeps n connections open that never say hello, redialling
// whatever the node closes, until ctx ends.
func (a *Attacker) ConnFlood(ctx context.Context, addr string, n int) {
	a.run(ctx, addr, n, wait)
}

// HugeFrames opens conns connections of streams streams each; every stream
// announces a frame of the largest size the node takes (10 MiB) and sends
// junk as fast as the node lets it, with no hello first.
func (a *Attacker) HugeFrames(ctx context.Context, addr string, conns, streams int) {
	junk := make([]byte, 64<<10)
	a.run(ctx, addr, conns, func(ctx context.Context, conn *quic.Conn) {
		var wg sync.WaitGroup
		for i := 0; i < streams; i++ {
			s, err := conn.OpenStreamSync(ctx)
			if err != nil {
				break
			}
			a.Stats.Streams.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				stop := context.AfterFunc(ctx, func() { s.CancelWrite(0) })
				defer stop()
				hdr := binary.BigEndian.AppendUint32(nil, wire.MaxMessageSize+1024)
				if _, err := s.Write(hdr); err != nil {
					return
				}
				for sent := 0; sent < 4<<20; sent += len(junk) {
					n, err := s.Write(junk)
					a.Stats.BytesSent.Add(int64(n))
					if err != nil {
						return
					}
				}
			}()
		}
		wait(ctx, conn)
		wg.Wait()
	})
}

// SlowHello announces a hello of plausible size and trickles it one byte
// at a time, every interval.
func (a *Attacker) SlowHello(ctx context.Context, addr string, conns int, interval time.Duration) {
	a.run(ctx, addr, conns, func(ctx context.Context, conn *quic.Conn) {
		s, err := conn.OpenStreamSync(ctx)
		if err != nil {
			return
		}
		if _, err := s.Write(binary.BigEndian.AppendUint32(nil, 200)); err != nil {
			return
		}
		for ctx.Err() == nil && conn.Context().Err() == nil {
			n, err := s.Write([]byte{0xa3})
			a.Stats.BytesSent.Add(int64(n))
			if err != nil {
				return
			}
			sleep(ctx, interval)
		}
	})
}

// Garbage sends a well-formed frame header followed by bytes that are not
// CBOR, then keeps sending more.
func (a *Attacker) Garbage(ctx context.Context, addr string, conns int) {
	junk := make([]byte, 600)
	for i := range junk {
		junk[i] = byte(0xff - i%7)
	}
	a.run(ctx, addr, conns, func(ctx context.Context, conn *quic.Conn) {
		s, err := conn.OpenStreamSync(ctx)
		if err != nil {
			return
		}
		frame := binary.BigEndian.AppendUint32(nil, 500)
		frame = append(frame, junk...)
		n, _ := s.Write(frame)
		a.Stats.BytesSent.Add(int64(n))
		wait(ctx, conn)
	})
}

// Session is a connection that has passed the hello, with the secret
// behind keys: an insider, or (with the wrong secret) an impostor whose
// Hello fails.
type Session struct {
	Conn     *quic.Conn
	NodeID   string
	RemoteID string
	Tier     security.Tier // the link's key tier the hello settled on
	Channel  []byte
	keys     *security.Keyring
	ids      *wire.SnowflakeGenerator
}

// ErrRefused is returned by Hello when the node closed the connection on
// the hello.
var ErrRefused = errors.New("hello refused")

// Hello dials addr and runs the dialer's side of the hello as nodeID.
func (a *Attacker) Hello(ctx context.Context, addr, nodeID string, keys *security.Keyring) (*Session, error) {
	conn, err := a.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Session, error) {
		conn.CloseWithError(0, "")
		return nil, err
	}
	st := conn.ConnectionState().TLS
	channel, err := st.ExportKeyingMaterial(exporterLabel, nil, 32)
	if err != nil {
		return fail(err)
	}
	s, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return fail(err)
	}
	s.SetDeadline(time.Now().Add(5 * time.Second))
	h := &wire.Hello{NodeID: nodeID}
	for tier := keys.Tier(); tier >= security.TierWorker; tier-- {
		keyID, proof, err := keys.Prove(tier, transcript(helloDialer, tier, channel, nodeID))
		if err != nil {
			return fail(err)
		}
		h.Proofs = append(h.Proofs, wire.HelloProof{Tier: uint8(tier), KeyID: keyID, Proof: proof})
	}
	b, err := wire.Marshal(h)
	if err != nil {
		return fail(err)
	}
	if _, err := s.Write(frame(b)); err != nil {
		return fail(err)
	}
	reply, err := readFrame(s, wire.MaxHelloSize)
	if err != nil {
		var ae *quic.ApplicationError
		if errors.As(err, &ae) {
			return fail(fmt.Errorf("%w: %s", ErrRefused, ae.ErrorMessage))
		}
		return fail(err)
	}
	ack, err := wire.DecodeHelloAck(reply)
	if err != nil {
		return fail(err)
	}
	tier := security.Tier(ack.Proof.Tier)
	if err := keys.VerifyProof(tier, ack.Proof.KeyID, transcript(helloListener, tier, channel, ack.NodeID, nodeID), ack.Proof.Proof); err != nil {
		return fail(fmt.Errorf("listener's proof: %w", err))
	}
	return &Session{Conn: conn, NodeID: nodeID, RemoteID: ack.NodeID, Tier: tier, Channel: channel, keys: keys,
		ids: wire.NewSnowflakeGenerator(nodeID, nil)}, nil
}

// Seal builds a framed envelope carrying msg as a request, sealed for this
// session's peer and connection, as the transport would.
func (s *Session) Seal(msg wire.Message) ([]byte, error) {
	body, err := wire.Marshal(msg)
	if err != nil {
		return nil, err
	}
	env := &wire.Envelope{Version: wire.ProtocolVersion, Sender: s.NodeID, Type: msg.Type(), ID: s.ids.Next()}
	sealed, err := s.keys.NewStreamSealer(s.Tier).Seal(nil, env.BoundAAD(nil, s.RemoteID, s.Channel), body)
	if err != nil {
		return nil, err
	}
	env.KeyID, env.Salt, env.Nonce, env.Body = sealed.KeyID, sealed.Salt, sealed.Nonce, sealed.Ciphertext
	b, err := wire.EncodeEnvelope(env)
	if err != nil {
		return nil, err
	}
	return frame(b), nil
}

// Outcome is how the node answered one envelope.
type Outcome int

const (
	// Accepted: a sealed reply came back, so the envelope opened and was
	// served (even an error reply, such as no handler, is sealed only
	// after the request was authenticated).
	Accepted Outcome = iota
	// Unauthenticated: a plain (unsealed) error: refused before serving.
	Unauthenticated
	// Silent: no answer in time, as for a replay.
	Silent
	// Rejected: a sealed error reply with code rejected: the envelope
	// opened, but its type is not one the sender's key tier may send.
	Rejected
)

func (o Outcome) String() string {
	return [...]string{"accepted", "refused (unauthenticated)", "no answer", "rejected"}[o]
}

// Send writes frames on a new stream of the session and reports how the
// node answered each, waiting up to wait for an answer.
func (s *Session) Send(ctx context.Context, wait time.Duration, frames ...[]byte) ([]Outcome, error) {
	st, err := s.Conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	out := make([]Outcome, 0, len(frames))
	for _, f := range frames {
		if _, err := st.Write(f); err != nil {
			return out, err
		}
		st.SetReadDeadline(time.Now().Add(wait))
		reply, err := readFrame(st, 16<<20)
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			out = append(out, Silent)
			continue
		case err != nil:
			return out, err
		}
		env, err := wire.DecodeEnvelope(reply)
		if err != nil {
			return out, err
		}
		switch {
		case env.Flags&wire.FlagPlainError != 0:
			out = append(out, Unauthenticated)
		case env.Type == wire.TypeError && s.isRejected(env):
			out = append(out, Rejected)
		default:
			out = append(out, Accepted)
		}
	}
	return out, nil
}

// isRejected opens a sealed error reply and reports whether it is a
// rejection.
func (s *Session) isRejected(env *wire.Envelope) bool {
	body, err := s.keys.NewStreamOpener(s.Tier).Open(env.KeyID, env.Salt, env.Nonce, env.BoundAAD(nil, s.NodeID, s.Channel), env.Body, nil)
	if err != nil {
		return false
	}
	var e wire.Error
	return wire.Unmarshal(body, &e) == nil && e.Code == wire.CodeRejected
}

// Call sends msg as a request on a new stream and returns the node's
// answer opened and decoded, as a node of this session's id would read it:
// a typed error reply comes back as a *wire.Error. It is how an insider
// reads what a node tells it (a fence token, a blob's bytes).
func (s *Session) Call(ctx context.Context, wait time.Duration, msg wire.Message) (wire.Message, error) {
	f, err := s.Seal(msg)
	if err != nil {
		return nil, err
	}
	st, err := s.Conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	if _, err := st.Write(f); err != nil {
		return nil, err
	}
	st.SetReadDeadline(time.Now().Add(wait))
	reply, err := readFrame(st, 16<<20)
	if err != nil {
		return nil, err
	}
	env, err := wire.DecodeEnvelope(reply)
	if err != nil {
		return nil, err
	}
	body := env.Body
	if env.Flags&wire.FlagPlainError == 0 {
		body, err = s.keys.NewStreamOpener(s.Tier).Open(env.KeyID, env.Salt, env.Nonce, env.BoundAAD(nil, s.NodeID, s.Channel), env.Body, nil)
		if err != nil {
			return nil, fmt.Errorf("open the reply: %w", err)
		}
	}
	m, err := wire.Decode(env.Type, body)
	if err != nil {
		return nil, err
	}
	if e, ok := m.(*wire.Error); ok {
		return nil, e
	}
	return m, nil
}

// Close ends the session.
func (s *Session) Close() { s.Conn.CloseWithError(0, "") }

func transcript(label string, tier security.Tier, channel []byte, ids ...string) []byte {
	b := append([]byte(label), byte(tier))
	b = append(b, channel...)
	for _, id := range ids {
		b = binary.AppendUvarint(b, uint64(len(id)))
		b = append(b, id...)
	}
	return b
}

func frame(payload []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(payload))), payload...)
}

func readFrame(r io.Reader, limit int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[:]))
	if n > limit {
		return nil, fmt.Errorf("frame of %d bytes over %d", n, limit)
	}
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return b, err
}
