package swim

import (
	"bytes"
	"errors"
	"testing"

	"tempest/wire"
)

// The decoders take bytes straight off UDP. Properties: never panic, never
// accept more than the size cap, and anything accepted re-encodes to bytes
// that decode to the same encoding (comparing encodings, not values, so NaN
// and nil-versus-empty maps do not cause false alarms).

func FuzzDecodeWorkerHeartbeat(f *testing.F) {
	good, _ := EncodeWorkerHeartbeat(sampleWorkerHeartbeat())
	other, _ := EncodeManagerHeartbeat(sampleManagerHeartbeat())
	for _, seed := range [][]byte{good, other, nil, {0}, {0, byte(wire.TypeWorkerHeartbeat)}, good[:len(good)/2]} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		hb, err := DecodeWorkerHeartbeat(b)
		if err != nil {
			return
		}
		if len(b) > MaxStateSize {
			t.Fatalf("accepted %d bytes", len(b))
		}
		checkStable(t, func() ([]byte, error) { return EncodeWorkerHeartbeat(hb) }, func(e []byte) ([]byte, error) {
			again, err := DecodeWorkerHeartbeat(e)
			if err != nil {
				return nil, err
			}
			return EncodeWorkerHeartbeat(again)
		})
	})
}

func FuzzDecodeManagerHeartbeat(f *testing.F) {
	good, _ := EncodeManagerHeartbeat(sampleManagerHeartbeat())
	other, _ := EncodeWorkerHeartbeat(sampleWorkerHeartbeat())
	for _, seed := range [][]byte{good, other, nil, {0, byte(wire.TypeManagerHeartbeat), 0xa0}} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		hb, err := DecodeManagerHeartbeat(b)
		if err != nil {
			return
		}
		if len(b) > MaxStateSize {
			t.Fatalf("accepted %d bytes", len(b))
		}
		checkStable(t, func() ([]byte, error) { return EncodeManagerHeartbeat(hb) }, func(e []byte) ([]byte, error) {
			again, err := DecodeManagerHeartbeat(e)
			if err != nil {
				return nil, err
			}
			return EncodeManagerHeartbeat(again)
		})
	})
}

func FuzzDecodeNodeMeta(f *testing.F) {
	good, _ := EncodeNodeMeta(NodeMeta{Role: wire.RoleWorker, Datacenter: "dc1", QUICAddr: "10.0.0.1:9000", Tags: map[string]string{"a": "b"}})
	leaving, _ := encodeMeta(NodeMeta{Role: wire.RoleGate}, true)
	for _, seed := range [][]byte{good, leaving, nil, {0xa0}, {0xbf, 0xff}} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, leaving, err := decodeMeta(b)
		if err != nil {
			return
		}
		if len(b) > MaxMetaSize {
			t.Fatalf("accepted %d bytes", len(b))
		}
		// A peer's meta need not pass our own validation, but if it fits
		// when re-encoded it must be stable.
		checkStable(t, func() ([]byte, error) { return encodeMeta(m, leaving) }, func(e []byte) ([]byte, error) {
			again, l, err := decodeMeta(e)
			if err != nil {
				return nil, err
			}
			return encodeMeta(again, l)
		})
	})
}

func checkStable(t *testing.T, encode func() ([]byte, error), reencode func([]byte) ([]byte, error)) {
	t.Helper()
	e1, err := encode()
	if errors.Is(err, ErrStateTooLarge) || errors.Is(err, ErrMetaTooLarge) {
		return // omitted defaults can grow a maximal input past the cap
	}
	if err != nil {
		t.Fatalf("re-encode of accepted input: %v", err)
	}
	e2, err := reencode(e1)
	if err != nil {
		t.Fatalf("decode of own encoding: %v", err)
	}
	if !bytes.Equal(e1, e2) {
		t.Fatalf("encoding not stable:\n%x\n%x", e1, e2)
	}
}
