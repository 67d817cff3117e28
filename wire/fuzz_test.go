package wire

import (
	"bytes"
	"reflect"
	"testing"
)

// seedMessages returns, for every catalogue type, the encodings of a zero
// value, of two fully populated values, and of one carrying unknown keys.
func seedMessages(tb testing.TB) map[MsgType][][]byte {
	tb.Helper()
	out := map[MsgType][][]byte{}
	for _, typ := range sortedTypes() {
		zero, _ := New(typ)
		full := mustMarshal(tb, filledMessage(tb, typ, 11))
		out[typ] = [][]byte{
			mustMarshal(tb, zero),
			full,
			mustMarshal(tb, filledMessage(tb, typ, 12)),
			withExtraKeys(tb, full, map[int64]any{99: []any{"future", uint64(1)}}, true),
		}
	}
	return out
}

func FuzzDecodeEnvelope(f *testing.F) {
	g := NewSnowflakeGenerator("fuzz", nil)
	for _, typ := range sortedTypes() {
		for i, body := range seedMessages(f)[typ] {
			e := &Envelope{
				Version: ProtocolVersion, KeyID: uint32(i), Sender: "gate-" + typ.String(), Type: typ,
				ID: g.Next(), ReplyTo: uint64(i), Flags: Flags(i), Body: body,
			}
			if i%2 == 1 {
				e.Salt, e.Nonce = bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 12)
			}
			b, err := EncodeEnvelope(e)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
			f.Add(body) // a bare message is not an envelope
		}
	}
	// Edge headers: minimal, v1 CBOR, empty sender, lengths past the end.
	fixed := "02 00 0001 00000000 0000000000000001 0000000000000000"
	for _, h := range []string{"", "a0", "a3 01 01 03 61 61 05 01", fixed + " 01 61 00 00",
		fixed + " 01 61 00 00 ff", fixed + " 00 00 00", fixed + " 05 61", fixed + " 01 61 10 00", fixed + " 01 61 00 0c 00"} {
		f.Add(unhex(f, h))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := DecodeEnvelope(data)
		// A stream reader's reused envelope, last holding another frame,
		// must read the same bytes the same way.
		reused := Envelope{Sender: "gate-" + TypePing.String(), ID: 7, Body: []byte{1}}
		rerr := DecodeEnvelopeInto(&reused, data)
		if (err == nil) != (rerr == nil) || (err == nil && !reflect.DeepEqual(*e, reused)) {
			t.Fatalf("reused envelope decoded differently: %v / %v\n%#v\n%#v", err, rerr, e, reused)
		}
		if err != nil {
			if e != nil {
				t.Fatalf("envelope returned with error %v", err)
			}
			if c := CodeOf(err); c != CodeMalformed && c != CodeTooLarge {
				t.Fatalf("error %v has code %s, want malformed or too_large", err, c)
			}
			return
		}
		if e.Version != ProtocolVersion || e.Sender == "" || len(e.Sender) > MaxSenderLen || e.ID == 0 {
			t.Fatalf("accepted an envelope that breaks the header rules: %#v", e)
		}
		b, err := EncodeEnvelope(e)
		if err != nil {
			t.Fatalf("re-encode of an accepted envelope: %v", err)
		}
		e2, err := DecodeEnvelope(b)
		if err != nil {
			t.Fatalf("re-encoded envelope refused: %v", err)
		}
		if !wireEqual(reflect.ValueOf(e), reflect.ValueOf(e2)) {
			t.Fatalf("round trip differs\nfirst:  %#v\nsecond: %#v", e, e2)
		}
		if b2, _ := EncodeEnvelope(e2); !bytes.Equal(b, b2) {
			t.Fatal("encoding is not stable across a round trip")
		}
		if !bytes.Equal(e.AAD(nil), e2.AAD(nil)) {
			t.Fatal("AAD changed across a round trip")
		}
	})
}

func FuzzDecode(f *testing.F) {
	for typ, bodies := range seedMessages(f) {
		for _, b := range bodies {
			f.Add(uint16(typ), b)
		}
	}
	// Unknown types, and bodies of one type offered as another.
	ping := mustMarshal(f, filledMessage(f, TypePing, 1))
	f.Add(uint16(0), ping)
	f.Add(uint16(65535), ping)
	f.Add(uint16(TypeStateSyncResponse), ping)
	f.Add(uint16(TypePing), mustMarshal(f, filledMessage(f, TypeStateSyncResponse, 1)))

	f.Fuzz(func(t *testing.T, rawType uint16, data []byte) {
		typ := MsgType(rawType)
		m, err := Decode(typ, data)
		if err != nil {
			if m != nil {
				t.Fatalf("message returned with error %v", err)
			}
			switch c := CodeOf(err); {
			case c == CodeUnknownType && !typ.Known():
			case (c == CodeMalformed || c == CodeTooLarge) && typ.Known():
			default:
				t.Fatalf("type %s: error %v has code %s", typ, err, c)
			}
			return
		}
		if !typ.Known() || m.Type() != typ {
			t.Fatalf("Decode(%d) gave a %T", rawType, m)
		}
		b1, err := Marshal(m)
		if err != nil {
			t.Fatalf("re-encode of an accepted %s: %v", typ, err)
		}
		m2, err := Decode(typ, b1)
		if err != nil {
			t.Fatalf("re-encoded %s refused: %v", typ, err)
		}
		if !wireEqual(reflect.ValueOf(m), reflect.ValueOf(m2)) {
			t.Fatalf("round trip differs\nfirst:  %#v\nsecond: %#v", m, m2)
		}
		b2, err := Marshal(m2)
		if err != nil || !bytes.Equal(b1, b2) {
			t.Fatalf("encoding of %s is not stable across a round trip (%v)", typ, err)
		}
	})
}
