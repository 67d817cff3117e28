package wire

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// validEnvelope is a well-formed envelope carrying a real message body.
func validEnvelope(tb testing.TB) *Envelope {
	tb.Helper()
	return &Envelope{
		Version: ProtocolVersion,
		KeyID:   0xa1b2c3d4,
		Sender:  "manager-dc1-2",
		Type:    TypeWorkflowProgress,
		ID:      g2first(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)),
		ReplyTo: 12345,
		Flags:   FlagOneWay,
		Salt:    bytes.Repeat([]byte{0x5a}, 32),
		Nonce:   bytes.Repeat([]byte{0x4e}, 12),
		Body:    mustMarshal(tb, filledMessage(tb, TypeWorkflowProgress, 1)),
	}
}

func TestEnvelopeRoundTrip(t *testing.T) {
	check := func(t *testing.T, e *Envelope) {
		t.Helper()
		b, err := EncodeEnvelope(e)
		if err != nil {
			t.Fatalf("EncodeEnvelope: %v", err)
		}
		got, err := DecodeEnvelope(b)
		if err != nil {
			t.Fatalf("DecodeEnvelope: %v", err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Fatalf("round trip differs\n got: %#v\nwant: %#v", got, e)
		}
		if b2, _ := EncodeEnvelope(got); !bytes.Equal(b, b2) {
			t.Fatal("re-encoding is not byte-identical")
		}
	}
	t.Run("fixed", func(t *testing.T) { check(t, validEnvelope(t)) })
	t.Run("filled", func(t *testing.T) {
		for seed := uint64(1); seed <= 16; seed++ {
			var e Envelope
			newFiller(t, seed).fill(reflect.ValueOf(&e).Elem(), 0)
			e.Version = ProtocolVersion
			checkNonZero(t, "Envelope", reflect.ValueOf(e))
			check(t, &e)
		}
	})
	t.Run("every message as body", func(t *testing.T) {
		g := NewSnowflakeGenerator("gate-1", nil)
		for _, typ := range sortedTypes() {
			msg := filledMessage(t, typ, 3)
			e := &Envelope{Version: ProtocolVersion, Sender: "gate-1", Type: typ, ID: g.Next(), Body: mustMarshal(t, msg)}
			check(t, e)
			got, err := Decode(e.Type, e.Body)
			if err != nil || !reflect.DeepEqual(got, msg) {
				t.Errorf("%s: body did not survive the envelope: %v", typ, err)
			}
		}
	})
	t.Run("minimal", func(t *testing.T) {
		check(t, &Envelope{Version: ProtocolVersion, Sender: "w", ID: 1})
	})
	t.Run("longest sender", func(t *testing.T) {
		check(t, &Envelope{Version: ProtocolVersion, Sender: strings.Repeat("s", MaxSenderLen), ID: 1})
	})
	t.Run("aliases its input", func(t *testing.T) {
		// The transport opens bodies in place: decoding must not copy them.
		b, err := EncodeEnvelope(validEnvelope(t))
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeEnvelope(b)
		if err != nil {
			t.Fatal(err)
		}
		if &got.Body[len(got.Body)-1] != &b[len(b)-1] {
			t.Error("Body does not alias the encoded bytes")
		}
		if cap(got.Salt) != len(got.Salt) || cap(got.Nonce) != len(got.Nonce) {
			t.Error("appending to Salt or Nonce could overwrite the fields after them")
		}
	})
}

func TestDecodeEnvelopeRefuses(t *testing.T) {
	encode := func(mutate func(*Envelope)) []byte {
		e := validEnvelope(t)
		mutate(e)
		b, err := AppendEnvelope(nil, e)
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		return b
	}
	good := encode(func(*Envelope) {})
	// Offsets into good: the sender's length byte, the salt's, the nonce's.
	senderAt := envelopeFixedLen - 1
	saltAt := senderAt + 1 + len(validEnvelope(t).Sender)
	nonceAt := saltAt + 1 + len(validEnvelope(t).Salt)
	patch := func(at int, v byte) []byte {
		b := bytes.Clone(good)
		b[at] = v
		return b
	}
	r := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 512)
	for i := range random {
		random[i] = byte(r.Uint32())
	}
	random[0] = ProtocolVersion + 1
	huge := validEnvelope(t)
	huge.Body = make([]byte, MaxMessageSize)
	v1 := mustMarshal(t, map[int]any{1: 1, 3: "a", 5: 1}) // a version 1 (CBOR) header

	cases := []struct {
		name string
		data []byte
		code Code
	}{
		{"version 0", encode(func(e *Envelope) { e.Version = 0 }), CodeMalformed},
		{"version 1 layout", v1, CodeMalformed},
		{"version 3", encode(func(e *Envelope) { e.Version = ProtocolVersion + 1 }), CodeMalformed},
		{"version 255", encode(func(e *Envelope) { e.Version = 255 }), CodeMalformed},
		{"empty sender", patch(senderAt, 0), CodeMalformed},
		{"sender past the end", patch(senderAt, 255)[:senderAt+100], CodeMalformed},
		{"sender not utf-8", func() []byte { b := bytes.Clone(good); b[senderAt+1] = 0xff; return b }(), CodeMalformed},
		{"salt past the end", good[:saltAt+1+len(validEnvelope(t).Salt)-1], CodeMalformed},
		{"salt length past the end", good[:saltAt], CodeMalformed},
		{"nonce past the end", good[:nonceAt+5], CodeMalformed},
		{"nonce length past the end", good[:nonceAt], CodeMalformed},
		{"nonce length over the rest", patch(nonceAt, 255)[:nonceAt+100], CodeMalformed},
		{"zero id", encode(func(e *Envelope) { e.ID = 0 }), CodeMalformed},
		{"short fixed header", good[:envelopeFixedLen-1], CodeMalformed},
		{"oversized garbage", bytes.Repeat([]byte{0xff}, MaxMessageSize+1), CodeTooLarge},
		{"oversized valid envelope", func() []byte { b, _ := EncodeEnvelope(huge); return b }(), CodeTooLarge},
		{"nil", nil, CodeMalformed},
		{"one byte", []byte{ProtocolVersion}, CodeMalformed},
		{"random bytes", random, CodeMalformed},
		{"a bare message", mustMarshal(t, filledMessage(t, TypePing, 1)), CodeMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, err := DecodeEnvelope(tc.data)
			if err == nil {
				t.Fatalf("accepted: %#v", e)
			}
			if e != nil {
				t.Errorf("returned an envelope with the error")
			}
			if got := CodeOf(err); got != tc.code {
				t.Errorf("code %s (%v), want %s", got, err, tc.code)
			}
		})
	}
}

func TestEncodeEnvelopeRefuses(t *testing.T) {
	for name, mutate := range map[string]func(*Envelope){
		"empty sender":     func(e *Envelope) { e.Sender = "" },
		"oversized sender": func(e *Envelope) { e.Sender = strings.Repeat("s", MaxSenderLen+1) },
		"oversized salt":   func(e *Envelope) { e.Salt = make([]byte, 256) },
		"oversized nonce":  func(e *Envelope) { e.Nonce = make([]byte, 256) },
	} {
		e := validEnvelope(t)
		mutate(e)
		if b, err := EncodeEnvelope(e); err == nil {
			t.Errorf("%s: encoded to %d bytes", name, len(b))
		}
	}
}

func TestEnvelopeAAD(t *testing.T) {
	base := validEnvelope(t)
	baseAAD := base.AAD(nil)

	// Every header field, with several changes each; a change must alter the AAD.
	inAAD := []struct {
		field  string
		mutate func(*Envelope)
	}{
		{"Version", func(e *Envelope) { e.Version++ }},
		{"Version", func(e *Envelope) { e.Version = 0 }},
		{"Sender", func(e *Envelope) { e.Sender += "x" }},
		{"Sender", func(e *Envelope) { e.Sender = "manager-dc1-3" }}, // same length
		{"Sender", func(e *Envelope) { e.Sender = "" }},
		{"Type", func(e *Envelope) { e.Type = TypeWorkflowDispatch }},
		{"Type", func(e *Envelope) { e.Type ^= 1 << 15 }},
		{"ID", func(e *Envelope) { e.ID++ }},
		{"ID", func(e *Envelope) { e.ID ^= 1 << 63 }},
		{"ReplyTo", func(e *Envelope) { e.ReplyTo = 0 }},
		{"ReplyTo", func(e *Envelope) { e.ReplyTo ^= 1 << 63 }},
		{"Flags", func(e *Envelope) { e.Flags = 0 }},
		{"Flags", func(e *Envelope) { e.Flags |= FlagReply }},
		{"Flags", func(e *Envelope) { e.Flags |= FlagPlainError }},
	}
	// Sealed or key-selection inputs: they must not feed the AAD.
	notInAAD := []struct {
		field  string
		mutate func(*Envelope)
	}{
		{"KeyID", func(e *Envelope) { e.KeyID++ }},
		{"Body", func(e *Envelope) { e.Body = append(e.Body, 1) }},
		{"Body", func(e *Envelope) { e.Body = nil }},
		{"Salt", func(e *Envelope) { e.Salt[0] ^= 0xff }},
		{"Salt", func(e *Envelope) { e.Salt = nil }},
		{"Nonce", func(e *Envelope) { e.Nonce[0] ^= 0xff }},
		{"Nonce", func(e *Envelope) { e.Nonce = nil }},
	}

	covered := map[string]bool{}
	for _, tc := range inAAD {
		covered[tc.field] = true
		e := validEnvelope(t)
		tc.mutate(e)
		if bytes.Equal(e.AAD(nil), baseAAD) {
			t.Errorf("changing %s does not change the AAD", tc.field)
		}
	}
	for _, tc := range notInAAD {
		covered[tc.field] = true
		e := validEnvelope(t)
		tc.mutate(e)
		if !bytes.Equal(e.AAD(nil), baseAAD) {
			t.Errorf("changing %s changes the AAD", tc.field)
		}
	}
	// A new Envelope field must be classified here: authenticated or not.
	for i := range reflect.TypeFor[Envelope]().NumField() {
		if f := reflect.TypeFor[Envelope]().Field(i).Name; !covered[f] {
			t.Errorf("Envelope.%s is not covered by the AAD table", f)
		}
	}

	// The sender is length-prefixed: moving bytes between the sender and the
	// fields that follow cannot give the same AAD.
	a := &Envelope{Version: 1, Sender: "ab", Type: 0x6300, ID: 1}
	b := &Envelope{Version: 1, Sender: "abc", Type: 0, ID: 1}
	if bytes.Equal(a.AAD(nil), b.AAD(nil)) {
		t.Error("sender boundary is ambiguous in the AAD")
	}

	// AAD appends and is deterministic.
	prefix := []byte("prefix")
	got := base.AAD(bytes.Clone(prefix))
	if !bytes.HasPrefix(got, prefix) || !bytes.Equal(got[len(prefix):], baseAAD) {
		t.Error("AAD(dst) does not append to dst")
	}
	if !bytes.Equal(validEnvelope(t).AAD(nil), baseAAD) {
		t.Error("AAD is not deterministic")
	}
	// Decoding does not change what the AAD covers.
	enc, err := EncodeEnvelope(base)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := DecodeEnvelope(enc)
	if err != nil || !bytes.Equal(dec.AAD(nil), baseAAD) {
		t.Errorf("AAD after decode differs (%v)", err)
	}
}

// ---- snowflake ids -------------------------------------------------------------------

// fakeClock is a settable clock safe to read from any goroutine.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock(t time.Time) *fakeClock {
	c := &fakeClock{}
	c.ns.Store(t.UnixNano())
	return c
}
func (c *fakeClock) Now() time.Time               { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Add(d time.Duration)          { c.ns.Add(int64(d)) }
func (c *fakeClock) Set(t time.Time)              { c.ns.Store(t.UnixNano()) }
func snowflakeNode(id uint64) uint64              { return id >> snowflakeSeqBits & (1<<snowflakeNodeBits - 1) }
func snowflakeSeq(id uint64) uint64               { return id & snowflakeSeqMask }
func snowflakeMs(id uint64) uint64                { return id >> (snowflakeNodeBits + snowflakeSeqBits) }
func within(a, b time.Time, d time.Duration) bool { return a.Sub(b).Abs() <= d }

// g2first is the id a fresh generator issues first at a frozen now.
func g2first(now time.Time) uint64 {
	return NewSnowflakeGenerator("x", func() time.Time { return now }).Next()
}

// nextN draws n ids and fails unless they are non-zero, strictly increasing
// from prev and carry the generator's node bits.
func nextN(t *testing.T, g *SnowflakeGenerator, prev uint64, n int) uint64 {
	t.Helper()
	for i := range n {
		id := g.Next()
		if id == 0 {
			t.Fatalf("id %d is zero", i)
		}
		if id <= prev {
			t.Fatalf("id %d: %#x not above previous %#x", i, id, prev)
		}
		if snowflakeNode(id) != g.node {
			t.Fatalf("id %#x: node bits %d, want %d", id, snowflakeNode(id), g.node)
		}
		prev = id
	}
	return prev
}

func TestSnowflakeStrictlyIncreasing(t *testing.T) {
	g := NewSnowflakeGenerator("worker-17", nil)
	nextN(t, g, 0, 100_000)
}

func TestSnowflakeUniqueAcrossGoroutines(t *testing.T) {
	const goroutines, per = 8, 20_000
	g := NewSnowflakeGenerator("gate-1", nil)
	results := make([][]uint64, goroutines)
	var wg sync.WaitGroup
	for i := range goroutines {
		wg.Go(func() {
			ids := make([]uint64, per)
			for j := range ids {
				ids[j] = g.Next()
			}
			results[i] = ids
		})
	}
	wg.Wait()
	seen := make(map[uint64]struct{}, goroutines*per)
	for i, ids := range results {
		for j, id := range ids {
			if id == 0 {
				t.Fatalf("goroutine %d: zero id", i)
			}
			if j > 0 && id <= ids[j-1] {
				t.Fatalf("goroutine %d: ids not increasing: %#x after %#x", i, id, ids[j-1])
			}
			if _, dup := seen[id]; dup {
				t.Fatalf("duplicate id %#x", id)
			}
			seen[id] = struct{}{}
		}
	}
}

func TestSnowflakeClockSteps(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := newFakeClock(start)
	g := NewSnowflakeGenerator("manager-1", clock.Now)
	steps := []struct {
		name string
		step func()
	}{
		{"steady", func() {}},
		{"tick forward", func() { clock.Add(time.Millisecond) }},
		{"back one ms", func() { clock.Add(-time.Millisecond) }},
		{"back one hour", func() { clock.Add(-time.Hour) }},
		{"forward but still behind", func() { clock.Add(30 * time.Minute) }},
		{"back before the epoch", func() { clock.Set(time.Unix(0, 0)) }},
		{"forward past the last id", func() { clock.Set(start.Add(2 * time.Hour)) }},
		{"sub-millisecond steps", func() { clock.Add(time.Microsecond) }},
	}
	prev := uint64(0)
	for _, s := range steps {
		s.step()
		prev = nextN(t, g, prev, 1000)
	}
	// Once the clock is ahead again, ids carry its time again.
	clock.Add(time.Second)
	id := g.Next()
	if id <= prev || !within(SnowflakeTime(id), clock.Now(), time.Millisecond) {
		t.Errorf("after catching up: id time %s, clock %s", SnowflakeTime(id), clock.Now())
	}
}

func TestSnowflakeSequenceOverflow(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 500_000, time.UTC)
	clock := newFakeClock(now)
	g := NewSnowflakeGenerator("worker-3", clock.Now)
	const n = 3*(snowflakeSeqMask+1) + 17 // more than 4096 in one frozen millisecond
	seen := make(map[uint64]bool, n)
	prev := uint64(0)
	for range n {
		id := nextN(t, g, prev, 1)
		if seen[id] {
			t.Fatalf("duplicate id %#x", id)
		}
		seen[id] = true
		prev = id
	}
	// Borrowing runs ahead of the frozen clock by at most one ms per 4096 ids.
	if ahead := snowflakeMs(prev) - snowflakeMs(g2first(now)); ahead != n/(snowflakeSeqMask+1) {
		t.Errorf("ran %d ms ahead after %d ids, want %d", ahead, n, n/(snowflakeSeqMask+1))
	}
	// The first 4096 ids share the clock's millisecond, with sequences 0..4095.
	g2 := NewSnowflakeGenerator("worker-3", clock.Now)
	for i := range snowflakeSeqMask + 1 {
		id := g2.Next()
		if !within(SnowflakeTime(id), now, time.Millisecond) || snowflakeSeq(id) != uint64(i) {
			t.Fatalf("id %d: time %s seq %d", i, SnowflakeTime(id), snowflakeSeq(id))
		}
	}
	// The 4097th borrows the next millisecond rather than wrapping.
	if id := g2.Next(); snowflakeSeq(id) != 0 || SnowflakeTime(id).Sub(now.Truncate(time.Millisecond)) != time.Millisecond {
		t.Errorf("4097th id: seq %d time %s", snowflakeSeq(id), SnowflakeTime(id))
	}
	// When the real clock moves past the borrowed time, ids keep increasing.
	clock.Add(10 * time.Millisecond)
	nextN(t, g, prev, 10)
}

func TestSnowflakeTime(t *testing.T) {
	for _, now := range []time.Time{
		time.Date(2024, 1, 1, 0, 0, 0, 1_000_000, time.UTC), // 1ms after the epoch
		time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
		time.Date(2026, 3, 1, 12, 0, 0, 999_999_999, time.UTC),
		time.Date(2031, 7, 4, 23, 59, 59, 123_456_789, time.FixedZone("x", 5*3600)),
		time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		g := NewSnowflakeGenerator("n", func() time.Time { return now })
		for range 3 {
			id := g.Next()
			got := SnowflakeTime(id)
			if d := now.Sub(got); d < 0 || d >= time.Millisecond {
				t.Errorf("now %s: SnowflakeTime = %s (off by %s)", now, got, d)
			}
		}
	}
}

func TestSnowflakeNeverZero(t *testing.T) {
	for _, now := range []time.Time{
		time.Unix(0, 0),
		time.UnixMilli(SnowflakeEpochUnixMilli),
		time.UnixMilli(SnowflakeEpochUnixMilli - 1),
		{},
	} {
		for _, node := range []string{"", "a", "worker-99"} {
			g := NewSnowflakeGenerator(node, func() time.Time { return now })
			nextN(t, g, 0, 5000) // includes a sequence overflow
		}
	}
}

func TestSnowflakeNodeBits(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	a1 := NewSnowflakeGenerator("gate-1", clock)
	a2 := NewSnowflakeGenerator("gate-1", clock)
	if a1.node != a2.node || a1.Next() != a2.Next() {
		t.Error("node bits are not a pure function of the node id")
	}
	nodes := map[uint64]bool{}
	for _, name := range []string{"gate-1", "gate-2", "manager-1", "manager-2", "worker-1", "worker-2"} {
		g := NewSnowflakeGenerator(name, clock)
		if g.node >= 1<<snowflakeNodeBits {
			t.Errorf("%s: node %d overflows %d bits", name, g.node, snowflakeNodeBits)
		}
		nodes[g.node] = true
	}
	if len(nodes) < 4 {
		t.Errorf("node bits barely vary across names: %v", nodes)
	}
}

// TestEnvelopeLayout pins the byte layout documented on Envelope: a peer
// built from another commit must read the same bytes the same way.
func TestEnvelopeLayout(t *testing.T) {
	e := &Envelope{
		Version: ProtocolVersion, Flags: FlagReply, Type: 0x0102, KeyID: 0x0a0b0c0d,
		ID: 0x1112131415161718, ReplyTo: 0x2122232425262728, Sender: "ab",
		Salt: []byte{0x31, 0x32}, Nonce: []byte{0x41}, Body: []byte{0x51, 0x52, 0x53},
	}
	want := unhex(t, "02 02 0102 0a0b0c0d 1112131415161718 2122232425262728 02 6162 02 3132 01 41 515253")
	got, err := EncodeEnvelope(e)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("encoded % x (%v)\nwant    % x", got, err, want)
	}
	dec, err := DecodeEnvelope(want)
	if err != nil || !reflect.DeepEqual(dec, e) {
		t.Fatalf("decoded %#v (%v)", dec, err)
	}
}

// A stream reader reuses one Envelope for every frame; the steady state
// (same sender frame after frame) must not allocate, and a new sender must
// still be read.
func TestDecodeEnvelopeIntoReusesTheSender(t *testing.T) {
	b, err := EncodeEnvelope(validEnvelope(t))
	if err != nil {
		t.Fatal(err)
	}
	var e Envelope
	if err := DecodeEnvelopeInto(&e, b); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { DecodeEnvelopeInto(&e, b) }); n != 0 {
		t.Errorf("decoding into a reused envelope allocates %.0f times", n)
	}
	other := validEnvelope(t)
	other.Sender = "manager-dc1-3"
	ob, _ := EncodeEnvelope(other)
	if err := DecodeEnvelopeInto(&e, ob); err != nil || e.Sender != "manager-dc1-3" {
		t.Fatalf("sender after a change: %q (%v)", e.Sender, err)
	}
	if err := DecodeEnvelopeInto(&e, []byte{0}); err == nil || e.Sender != "" {
		t.Fatalf("a refused frame left sender %q (%v)", e.Sender, err)
	}
}
