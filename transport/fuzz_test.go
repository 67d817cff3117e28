package transport

import (
	"bytes"
	"testing"

	"tempest/security"
	"tempest/wire"
)

// FuzzOpenFrame feeds arbitrary frames through the inbound path every
// untrusted byte takes: framing, header decode, rate limit, authentication,
// replay guard and body decode. It must never panic, and nothing but a
// genuinely sealed frame may open.
func FuzzOpenFrame(f *testing.F) {
	sender := newFuzzNode(f, "fuzz-sender")
	channel := bytes.Repeat([]byte{7}, channelLen)
	w := &streamWriter{sealer: sender.keys.NewStreamSealer(security.TierCluster), recipient: "fuzz-recv", channel: channel}
	for _, typ := range wire.Types() {
		m, _ := wire.New(typ)
		_, sb, err := sender.seal(w, m, 0, 0)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(bytes.Clone(sb.frame))
	}
	f.Add(appendFrame(nil, []byte{0xa0}))
	f.Add([]byte{0, 0, 0, 1, 0xff})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	recv := newFuzzNode(f, "fuzz-recv")
	f.Fuzz(func(t *testing.T, data []byte) {
		payload, _, err := readFrame(bytes.NewReader(data), nil, maxFrameLen)
		if err != nil {
			return
		}
		conn := &servedConn{peerID: "fuzz-sender", tier: security.TierCluster, channel: channel, remote: "fuzz"}
		var (
			env wire.Envelope
			aad []byte
		)
		msg, oerr := recv.open(&env, payload, conn, recv.keys.NewStreamOpener(security.TierCluster), &aad)
		if oerr == nil {
			if msg == nil || msg.Type() != env.Type {
				t.Fatalf("opened inconsistently: %v %v", env, msg)
			}
			if env.Sender != "fuzz-sender" {
				t.Fatalf("forged envelope from %q opened", env.Sender)
			}
		}
	})
}

func newFuzzNode(f *testing.F, id string) *QUIC {
	f.Helper()
	kr, err := securityKeyring(secretOld)
	if err != nil {
		f.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.NodeID = id
	cfg.Keyring = kr
	cfg.Logger = quietLogger()
	tr, err := NewQUIC(cfg)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { tr.Close() })
	return tr
}

// FuzzHello feeds arbitrary bytes through the listener's and the dialer's
// hello decoders and proof checks, the only code that reads a connection
// before it has proven the secret. It must never panic, never accept a
// frame over wire.MaxHelloSize, and never verify a proof it did not get
// from a holder of the secret for this channel.
func FuzzHello(f *testing.F) {
	node := newFuzzNode(f, "fuzz-hello")
	channel := bytes.Repeat([]byte{9}, channelLen)
	tier := security.TierCluster
	keyID, proof, err := node.keys.Prove(tier, helloTranscript(helloClient, tier, channel, "dialer"))
	if err != nil {
		f.Fatal(err)
	}
	good, _ := wire.Marshal(&wire.Hello{NodeID: "dialer", Proofs: []wire.HelloProof{{Tier: uint8(tier), KeyID: keyID, Proof: proof}}})
	f.Add(appendFrame(nil, good))
	ackID, ackProof, err := node.keys.Prove(tier, helloTranscript(helloServer, tier, channel, "listener", "fuzz-hello"))
	if err != nil {
		f.Fatal(err)
	}
	ack, _ := wire.Marshal(&wire.HelloAck{NodeID: "listener", Proof: wire.HelloProof{Tier: uint8(tier), KeyID: ackID, Proof: ackProof}})
	f.Add(appendFrame(nil, ack))
	f.Add([]byte{0, 0, 4, 1})
	f.Add(appendFrame(nil, []byte{0xa2, 0x01, 0x60, 0x02, 0x80}))
	f.Fuzz(func(t *testing.T, data []byte) {
		payload, _, err := readFrame(bytes.NewReader(data), nil, wire.MaxHelloSize)
		if err != nil {
			return
		}
		if len(payload) > wire.MaxHelloSize {
			t.Fatalf("read a hello of %d bytes", len(payload))
		}
		if h, err := wire.DecodeHello(payload); err == nil {
			if h.NodeID == "" || len(h.NodeID) > wire.MaxSenderLen || len(h.Proofs) == 0 || len(h.Proofs) > wire.MaxHelloTiers {
				t.Fatalf("hello %+v decoded", h)
			}
			for _, p := range h.Proofs {
				pt := security.Tier(p.Tier)
				verr := node.keys.VerifyProof(pt, p.KeyID, helloTranscript(helloClient, pt, channel, h.NodeID), p.Proof)
				if verr == nil && (h.NodeID != "dialer" || pt != tier || !bytes.Equal(p.Proof, proof)) {
					t.Fatalf("forged hello from %q verified", h.NodeID)
				}
			}
		}
		if a, err := wire.DecodeHelloAck(payload); err == nil {
			pt := security.Tier(a.Proof.Tier)
			verr := node.keys.VerifyProof(pt, a.Proof.KeyID, helloTranscript(helloServer, pt, channel, a.NodeID, "fuzz-hello"), a.Proof.Proof)
			if verr == nil && (a.NodeID != "listener" || !bytes.Equal(a.Proof.Proof, ackProof)) {
				t.Fatalf("forged hello ack from %q verified", a.NodeID)
			}
		}
	})
}
