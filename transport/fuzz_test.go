package transport

import (
	"bytes"
	"testing"

	"tempest/wire"
)

// FuzzOpenFrame feeds arbitrary frames through the inbound path every
// untrusted byte takes: framing, header decode, rate limit, authentication,
// replay guard and body decode. It must never panic, and nothing but a
// genuinely sealed frame may open.
func FuzzOpenFrame(f *testing.F) {
	sender := newFuzzNode(f, "fuzz-sender")
	for _, typ := range wire.Types() {
		m, _ := wire.New(typ)
		_, frame, err := sender.seal(sender.keys.NewStreamSealer(), m, 0, 0)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(frame)
	}
	f.Add(appendFrame(nil, []byte{0xa0}))
	f.Add([]byte{0, 0, 0, 1, 0xff})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	recv := newFuzzNode(f, "fuzz-recv")
	f.Fuzz(func(t *testing.T, data []byte) {
		payload, _, err := readFrame(bytes.NewReader(data), nil)
		if err != nil {
			return
		}
		env, msg, oerr := recv.open(payload, "fuzz", recv.keys.NewStreamOpener())
		if oerr == nil {
			if env == nil || msg == nil || msg.Type() != env.Type {
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
