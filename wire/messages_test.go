package wire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
)

// ---- helpers shared by the tests, fuzzers and benchmarks of this package ----

// sortedTypes is Types() in numeric order, so subtests and seeds are stable.
func sortedTypes() []MsgType {
	ts := Types()
	slices.Sort(ts)
	return ts
}

// filler populates any wire value with non-zero, valid data: every string is
// valid UTF-8 and non-empty, every number non-zero, every slice and map has at
// least one element, every pointer is set. It recurses to maxDepth levels.
type filler struct {
	tb       testing.TB
	r        *rand.Rand
	maxDepth int
}

func newFiller(tb testing.TB, seed uint64) *filler {
	return &filler{tb: tb, r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), maxDepth: 16}
}

// fillRunes mixes ASCII with multi-byte runes so the UTF-8 check is exercised.
var fillRunes = []rune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/éß世界🚀")

func (f *filler) fill(v reflect.Value, depth int) {
	if depth > f.maxDepth {
		return
	}
	switch v.Kind() {
	case reflect.String:
		rs := make([]rune, 1+f.r.IntN(12))
		for i := range rs {
			rs[i] = fillRunes[f.r.IntN(len(fillRunes))]
		}
		v.SetString(string(rs))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		x := int64(f.r.Uint64()) >> (64 - v.Type().Bits()) // any sign, full range
		if x == 0 {
			x = -1
		}
		v.SetInt(x)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		x := f.r.Uint64() >> (64 - v.Type().Bits())
		if x == 0 {
			x = 1
		}
		v.SetUint(x)
	case reflect.Float32, reflect.Float64:
		x := (f.r.Float64()*2 - 1) * 1e9
		if x == 0 {
			x = 0.5
		}
		if v.Kind() == reflect.Float32 {
			x = float64(float32(x))
		}
		v.SetFloat(x)
	case reflect.Slice:
		n := 1 + f.r.IntN(3)
		if v.Type().Elem().Kind() == reflect.Uint8 {
			n = 1 + f.r.IntN(48)
		}
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			f.fill(s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Array:
		for i := range v.Len() {
			f.fill(v.Index(i), depth+1)
		}
	case reflect.Map:
		n := 1 + f.r.IntN(3)
		m := reflect.MakeMapWithSize(v.Type(), n)
		for range n {
			k := reflect.New(v.Type().Key()).Elem()
			f.fill(k, depth+1)
			e := reflect.New(v.Type().Elem()).Elem()
			f.fill(e, depth+1)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		f.fill(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				f.fill(v.Field(i), depth+1)
			}
		}
	default:
		f.tb.Fatalf("filler: unsupported kind %s (%s): teach the filler and check the codec handles it", v.Kind(), v.Type())
	}
}

// filledMessage returns a message of type t with every field populated.
func filledMessage(tb testing.TB, t MsgType, seed uint64) Message {
	tb.Helper()
	m, err := New(t)
	if err != nil {
		tb.Fatalf("New(%s): %v", t, err)
	}
	newFiller(tb, seed^uint64(t)<<32).fill(reflect.ValueOf(m).Elem(), 0)
	return m
}

// checkNonZero fails tb for every zero scalar, nil pointer and empty slice or
// map reachable from v: proof that the filler left nothing out.
func checkNonZero(tb testing.TB, path string, v reflect.Value) {
	tb.Helper()
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() { // what does not travel need not be filled
				checkNonZero(tb, path+"."+v.Type().Field(i).Name, v.Field(i))
			}
		}
	case reflect.Pointer:
		if v.IsNil() {
			tb.Errorf("%s is nil", path)
			return
		}
		checkNonZero(tb, path, v.Elem())
	case reflect.Slice, reflect.Array:
		if v.Len() == 0 {
			tb.Errorf("%s is empty", path)
		}
		for i := range v.Len() {
			checkNonZero(tb, fmt.Sprintf("%s[%d]", path, i), v.Index(i))
		}
	case reflect.Map:
		if v.Len() == 0 {
			tb.Errorf("%s is empty", path)
		}
		it := v.MapRange()
		for it.Next() {
			checkNonZero(tb, fmt.Sprintf("%s[%v]", path, it.Key()), it.Value())
		}
	default:
		if v.IsZero() {
			tb.Errorf("%s is zero", path)
		}
	}
}

// wireEqual is equality as the wire sees it: a nil and an empty slice or map
// are the same (omitempty drops both), and NaN equals NaN (the deterministic
// encoder writes every NaN the same way). Everything else must match exactly.
func wireEqual(a, b reflect.Value) bool {
	if a.Type() != b.Type() {
		return false
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return wireEqual(a.Elem(), b.Elem())
	case reflect.Struct:
		for i := range a.NumField() {
			if !wireEqual(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Slice, reflect.Array:
		if a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !wireEqual(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.Len() != b.Len() {
			return false
		}
		it := a.MapRange()
		for it.Next() {
			bv := b.MapIndex(it.Key())
			if !bv.IsValid() || !wireEqual(it.Value(), bv) {
				return false
			}
		}
		return true
	case reflect.Float32, reflect.Float64:
		x, y := a.Float(), b.Float()
		return x == y || (x != x && y != y)
	default:
		return a.Equal(b)
	}
}

// unhex decodes a hex string that may contain spaces.
func unhex(tb testing.TB, s string) []byte {
	tb.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		tb.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

func mustMarshal(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := Marshal(v)
	if err != nil {
		tb.Fatalf("Marshal(%T): %v", v, err)
	}
	return b
}

// wireStructTypes collects every struct type reachable from the catalogue
// and the envelope: the messages and everything nested in them.
func wireStructTypes(tb testing.TB) []reflect.Type {
	tb.Helper()
	seen := map[reflect.Type]bool{}
	var out []reflect.Type
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array:
			walk(t.Elem())
		case reflect.Map:
			walk(t.Key())
			walk(t.Elem())
		case reflect.Struct:
			if seen[t] {
				return
			}
			seen[t] = true
			out = append(out, t)
			for i := range t.NumField() {
				walk(t.Field(i).Type)
			}
		}
	}
	for _, typ := range sortedTypes() {
		m, err := New(typ)
		if err != nil {
			tb.Fatalf("New(%s): %v", typ, err)
		}
		walk(reflect.TypeOf(m))
	}
	// The Envelope is not CBOR: its fixed layout is pinned by the envelope
	// tests and fuzz target instead.
	return out
}

// ---- catalogue -----------------------------------------------------------------

func TestCatalogue(t *testing.T) {
	types := sortedTypes()
	if len(types) == 0 {
		t.Fatal("empty catalogue")
	}
	goTypes := map[reflect.Type]MsgType{}
	for _, typ := range types {
		if typ == TypeInvalid {
			t.Errorf("TypeInvalid is in the catalogue")
		}
		if !typ.Known() {
			t.Errorf("%d: listed by Types() but not Known()", typ)
		}
		m, err := New(typ)
		if err != nil {
			t.Errorf("New(%d): %v", typ, err)
			continue
		}
		if got := m.Type(); got != typ {
			t.Errorf("New(%d).Type() = %d", typ, got)
		}
		rt := reflect.TypeOf(m)
		if rt.Kind() != reflect.Pointer || rt.Elem().Kind() != reflect.Struct {
			t.Errorf("New(%s) is %s, want a pointer to a struct", typ, rt)
			continue
		}
		if rt.Elem().Name() != typ.String() {
			t.Errorf("type %d is named %q but its struct is %s", typ, typ.String(), rt.Elem().Name())
		}
		if prev, dup := goTypes[rt]; dup {
			t.Errorf("types %s and %d share the Go type %s", prev, typ, rt)
		}
		goTypes[rt] = typ
		if !reflect.ValueOf(m).Elem().IsZero() {
			t.Errorf("New(%s) is not a zero value", typ)
		}
		if c := typ.Class(); int(c) >= NumClasses {
			t.Errorf("%s has class %d outside 0..%d", typ, c, NumClasses-1)
		}
	}
}

func TestUnknownType(t *testing.T) {
	for _, typ := range []MsgType{TypeInvalid, 3, 99, 1000, 65535} {
		if typ.Known() {
			t.Fatalf("%d unexpectedly known", typ)
		}
		m, err := New(typ)
		if m != nil {
			t.Errorf("New(%d) returned %v", typ, m)
		}
		var we *Error
		if !errors.As(err, &we) || we.Code != CodeUnknownType {
			t.Errorf("New(%d) error = %v, want *Error with CodeUnknownType", typ, err)
		}
		m, err = Decode(typ, unhex(t, "a1 01 01"))
		if m != nil || CodeOf(err) != CodeUnknownType {
			t.Errorf("Decode(%d) = %v, %v; want nil, CodeUnknownType", typ, m, err)
		}
		if got, want := typ.String(), fmt.Sprintf("MsgType(%d)", uint16(typ)); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
		if typ.Class() != ClassControl {
			t.Errorf("unknown type %d has class %s, want control (strictest bucket)", typ, typ.Class())
		}
	}
}

func TestClasses(t *testing.T) {
	want := map[MsgType]Class{
		TypePing: ClassDiag, TypePong: ClassDiag,
		TypeError: ClassControl, TypeJobSubmission: ClassControl, TypeCancelJob: ClassControl,
		TypeProvisionRequest: ClassControl, TypeStateSyncRequest: ClassControl, TypeLeaseTransfer: ClassControl,
		TypeWorkerRegistration: ClassControl,
		TypeWorkflowDispatch:   ClassDispatch, TypeWorkflowDispatchAck: ClassDispatch,
		TypeWorkflowProgress: ClassProgress, TypeJobProgress: ClassProgress, TypeReplicateJobStatus: ClassProgress,
		TypeWorkerHeartbeat: ClassProgress, TypeManagerHeartbeat: ClassProgress,
		TypePreVoteRequest: ClassElection, TypePreVoteResponse: ClassElection, TypeVoteRequest: ClassElection,
		TypeVoteResponse: ClassElection, TypeLeaderHeartbeat: ClassElection, TypeLeaderHeartbeatAck: ClassElection,
		TypeTimeoutNow: ClassElection,
	}
	for typ, c := range want {
		if got := typ.Class(); got != c {
			t.Errorf("%s.Class() = %s, want %s", typ, got, c)
		}
	}
	names := map[string]bool{}
	for c := range Class(NumClasses) {
		s := c.String()
		if strings.HasPrefix(s, "class(") || names[s] {
			t.Errorf("Class(%d).String() = %q: missing or duplicate name", c, s)
		}
		names[s] = true
	}
	if got := Class(200).String(); got != "class(200)" {
		t.Errorf("Class(200).String() = %q", got)
	}
}

// TestWireTags is what keeps the wire contract stable: every field of every
// struct that travels has an explicit integer key, unique in its struct, so
// renaming or reordering Go fields never changes the bytes.
func TestWireTags(t *testing.T) {
	allowed := map[string]bool{"keyasint": true, "omitempty": true, "omitzero": true}
	for _, st := range wireStructTypes(t) {
		keys := map[int]string{}
		// A type with an encoding of its own (RainstormBatch's flat
		// layout) may keep what it needs to write it in unexported fields.
		selfEncoded := reflect.PointerTo(st).Implements(reflect.TypeFor[cbor.Marshaler]())
		for i := range st.NumField() {
			f := st.Field(i)
			where := st.Name() + "." + f.Name
			if !f.IsExported() && selfEncoded {
				continue
			}
			if !f.IsExported() {
				t.Errorf("%s is unexported and would silently not travel", where)
				continue
			}
			if f.Anonymous {
				t.Errorf("%s is embedded; give it its own key instead", where)
			}
			tag, ok := f.Tag.Lookup("cbor")
			if !ok {
				t.Errorf("%s has no cbor tag", where)
				continue
			}
			parts := strings.Split(tag, ",")
			n, err := strconv.Atoi(parts[0])
			if err != nil || n < 0 {
				t.Errorf("%s: cbor key %q is not a non-negative integer", where, parts[0])
				continue
			}
			if !slices.Contains(parts[1:], "keyasint") {
				t.Errorf("%s: cbor tag %q lacks keyasint", where, tag)
			}
			for _, opt := range parts[1:] {
				if !allowed[opt] {
					t.Errorf("%s: unexpected cbor option %q", where, opt)
				}
			}
			if prev, dup := keys[n]; dup {
				t.Errorf("%s: key %d already used by %s", where, n, prev)
			}
			keys[n] = f.Name
		}
	}
}

// TestNestingWithinDecoderLimit checks that the deepest message the schema
// allows still fits under the decoder's nesting limit, with room to grow.
func TestNestingWithinDecoderLimit(t *testing.T) {
	var depth func(reflect.Type) int
	depth = func(t reflect.Type) int {
		switch t.Kind() {
		case reflect.Pointer:
			return depth(t.Elem())
		case reflect.Slice, reflect.Array:
			if t.Elem().Kind() == reflect.Uint8 {
				return 0 // a byte string
			}
			return 1 + depth(t.Elem())
		case reflect.Map:
			return 1 + max(depth(t.Key()), depth(t.Elem()))
		case reflect.Struct:
			d := 0
			for i := range t.NumField() {
				d = max(d, depth(t.Field(i).Type))
			}
			return 1 + d
		}
		return 0
	}
	for _, typ := range sortedTypes() {
		m, _ := New(typ)
		if d := depth(reflect.TypeOf(m)); d > maxNestedLevels-4 {
			t.Errorf("%s nests %d levels; the decoder allows %d, leave headroom", typ, d, maxNestedLevels)
		}
	}
}

// ---- round trips ---------------------------------------------------------------

func TestRoundTripEveryType(t *testing.T) {
	for _, typ := range sortedTypes() {
		t.Run(typ.String(), func(t *testing.T) {
			for seed := uint64(1); seed <= 8; seed++ {
				orig := filledMessage(t, typ, seed)
				checkNonZero(t, typ.String(), reflect.ValueOf(orig))
				b := mustMarshal(t, orig)
				got, err := Decode(typ, b)
				if err != nil {
					t.Fatalf("seed %d: Decode: %v", seed, err)
				}
				if !reflect.DeepEqual(orig, got) {
					t.Fatalf("seed %d: round trip differs\n got: %#v\nwant: %#v", seed, got, orig)
				}
				if b2 := mustMarshal(t, got); !bytes.Equal(b, b2) {
					t.Fatalf("seed %d: re-encoding is not byte-identical", seed)
				}
			}
		})
	}
}

func TestRoundTripZeroValues(t *testing.T) {
	for _, typ := range sortedTypes() {
		orig, _ := New(typ)
		got, err := Decode(typ, mustMarshal(t, orig))
		if err != nil {
			t.Errorf("%s: %v", typ, err)
			continue
		}
		if !reflect.DeepEqual(orig, got) {
			t.Errorf("%s: zero value round trip gave %#v", typ, got)
		}
	}
}

func TestMarshalDeterministic(t *testing.T) {
	// Map iteration order is random; canonical encoding sorts keys.
	m := filledMessage(t, TypeStateSyncResponse, 42)
	first := mustMarshal(t, m)
	for range 20 {
		if !bytes.Equal(first, mustMarshal(t, m)) {
			t.Fatal("Marshal of the same value gave different bytes")
		}
	}
}

// withExtraKeys re-encodes a struct-as-map with extra integer keys, as a newer
// peer that added fields would send it. Nested struct values get the same
// treatment, so unknown fields are exercised at every level.
func withExtraKeys(tb testing.TB, b []byte, extra map[int64]any, nested bool) []byte {
	tb.Helper()
	if len(b) > 0 && b[0]>>5 == 2 {
		return b // a byte string: a type with a layout of its own, which has no keys (RainstormBatch)
	}
	var m map[int64]cbor.RawMessage
	if err := cbor.Unmarshal(b, &m); err != nil {
		tb.Fatalf("re-reading as a map: %v", err)
	}
	if nested {
		for k, raw := range m {
			var inner map[int64]cbor.RawMessage
			if cbor.Unmarshal(raw, &inner) == nil && len(inner) > 0 {
				m[k] = withExtraKeys(tb, raw, extra, true)
			}
		}
	}
	for k, v := range extra {
		if _, clash := m[k]; clash {
			tb.Fatalf("extra key %d clashes with a known field", k)
		}
		m[k] = mustMarshal(tb, v)
	}
	return mustMarshal(tb, m)
}

func TestUnknownFieldsIgnored(t *testing.T) {
	extra := map[int64]any{
		99:  map[int]any{1: "added in v2", 2: []any{uint64(1), "x", []byte{1, 2}}, 3: map[string]int{"a": 1}},
		100: 3.25,
		-7:  "negative keys are just more unknown keys",
	}
	for _, typ := range sortedTypes() {
		orig := filledMessage(t, typ, 7)
		b := withExtraKeys(t, mustMarshal(t, orig), extra, true)
		got, err := Decode(typ, b)
		if err != nil {
			t.Errorf("%s with unknown keys: %v", typ, err)
			continue
		}
		if !reflect.DeepEqual(orig, got) {
			t.Errorf("%s with unknown keys decoded to %#v, want %#v", typ, got, orig)
		}
	}
}

// TestStringKeyedMapIgnored feeds each message a map keyed by the Go field
// names and the key numbers as text. It must not panic and must not fill any
// field: the contract is integer keys only.
func TestStringKeyedMapIgnored(t *testing.T) {
	for _, typ := range sortedTypes() {
		m, _ := New(typ)
		st := reflect.TypeOf(m).Elem()
		sm := map[string]any{}
		for i := range st.NumField() {
			f := st.Field(i)
			sm[f.Name] = uint64(1)
			sm[strings.Split(f.Tag.Get("cbor"), ",")[0]] = "x"
		}
		got, err := Decode(typ, mustMarshal(t, sm))
		if err != nil {
			if CodeOf(err) != CodeMalformed {
				t.Errorf("%s: refused with %v, want CodeMalformed", typ, err)
			}
			continue
		}
		if zero, _ := New(typ); !reflect.DeepEqual(got, zero) {
			t.Errorf("%s: text keys filled fields: %#v", typ, got)
		}
	}
}

// ---- the strict decoder ---------------------------------------------------------

func TestDecodeRefusesMalformed(t *testing.T) {
	cases := []struct {
		name string
		typ  MsgType
		hex  string
	}{
		{"duplicate known key", TypePing, "a2 01 01 01 02"},
		{"duplicate key, non-shortest second", TypePing, "a2 01 01 18 01 02"},
		{"duplicate unknown key", TypePing, "a2 18 63 01 18 63 02"},
		{"duplicate key in nested map", TypeWorkerHeartbeat, "a1 09 a2 61 61 61 62 61 61 61 63"},
		{"duplicate key in nested struct", TypeWorkflowDispatch, "a1 03 a2 01 61 61 01 61 62"},
		{"indefinite-length map", TypePing, "bf 01 01 ff"},
		{"indefinite-length byte string", TypePing, "a1 02 5f 41 00 ff"},
		{"indefinite-length text string", TypeCancelJob, "a1 01 7f 61 61 ff"},
		{"indefinite-length array", TypeJobAck, "a1 05 9f 61 61 ff"},
		{"indefinite-length in unknown field", TypePing, "a1 18 63 9f ff"},
		{"tag around message", TypePing, "c1 a1 01 01"},
		{"self-describe tag", TypePing, "d9 d9 f7 a1 01 01"},
		{"tag on field", TypePing, "a1 01 c1 01"},
		{"bignum tag on field", TypePing, "a1 01 c2 41 01"},
		{"tag in unknown field", TypePing, "a1 18 63 d8 20 61 61"},
		{"empty input", TypePing, ""},
		{"truncated map", TypePing, "a2 01 01"},
		{"truncated byte string", TypePing, "a1 02 45 00"},
		{"truncated head", TypePing, "a1 01 1b 00"},
		{"trailing byte", TypePing, "a1 01 01 00"},
		{"two items", TypePing, "a1 01 01 a1 01 01"},
		{"invalid utf-8 in string field", TypeCancelJob, "a1 01 61 ff"},
		{"invalid utf-8 in map key", TypeWorkerHeartbeat, "a1 09 a1 61 ff 61 61"},
		{"text for uint", TypePing, "a1 01 61 61"},
		{"negative for uint", TypePing, "a1 01 20"},
		{"uint64 overflows int", TypeJobAck, "a1 04 1b ff ff ff ff ff ff ff ff"},
		{"array for struct", TypeWorkflowDispatch, "a1 03 81 01"},
		{"array at top level", TypePing, "82 01 02"},
		{"scalar at top level", TypePing, "01"},
		{"float map key", TypePing, "a1 f9 3c 00 01"},
		{"array map key", TypePing, "a1 81 01 01"},
		{"key beyond int64", TypePing, "a1 1b ff ff ff ff ff ff ff ff 01"},
		{"byte string longer than input", TypePing, "a1 02 5b 00 00 00 ff ff ff ff ff"},
		{"array longer than input", TypePing, "a1 18 63 9b 00 00 00 00 ff ff ff ff"},
		{"map longer than input", TypePing, "bb 00 00 00 00 ff ff ff ff"},
		{"reserved additional info", TypePing, "a1 01 1c"},
		{"lone break", TypePing, "ff"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Decode(tc.typ, unhex(t, tc.hex))
			if err == nil {
				t.Fatalf("accepted: %#v", m)
			}
			if m != nil {
				t.Errorf("returned a message with the error: %#v", m)
			}
			var we *Error
			if !errors.As(err, &we) || we.Code != CodeMalformed {
				t.Fatalf("error %v, want *Error with CodeMalformed", err)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("errors.Is(err, ErrMalformed) = false for %v", err)
			}
		})
	}
}

// unknownFieldWith wraps value as key 99 of an otherwise empty Ping.
func unknownFieldWith(value []byte) []byte {
	return append([]byte{0xa1, 0x18, 0x63}, value...)
}

func TestDecodeNestingLimit(t *testing.T) {
	// The outer map is level 1; each one-element array adds a level.
	nested := func(levels int) []byte {
		v := append(bytes.Repeat([]byte{0x81}, levels-1), 0x00)
		return unknownFieldWith(v)
	}
	for _, tc := range []struct {
		levels int
		ok     bool
	}{
		{maxNestedLevels - 1, true},
		{maxNestedLevels, true},
		{maxNestedLevels + 1, false},
		{maxNestedLevels * 64, false},
	} {
		_, err := Decode(TypePing, nested(tc.levels))
		if tc.ok && err != nil {
			t.Errorf("%d levels refused: %v", tc.levels, err)
		}
		if !tc.ok && CodeOf(err) != CodeMalformed {
			t.Errorf("%d levels: err = %v, want CodeMalformed", tc.levels, err)
		}
	}
	// Maps count too.
	deepMaps := unknownFieldWith(append(bytes.Repeat([]byte{0xa1, 0x01}, maxNestedLevels), 0x00))
	if _, err := Decode(TypePing, deepMaps); CodeOf(err) != CodeMalformed {
		t.Errorf("deep maps: err = %v, want CodeMalformed", err)
	}
}

func TestDecodeCountLimits(t *testing.T) {
	array := func(n int) []byte {
		var b []byte
		b = append(b, 0x9a, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
		return unknownFieldWith(append(b, make([]byte, n)...))
	}
	mapOf := func(n int) []byte {
		b := []byte{0xba, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
		for i := range n {
			b = append(b, 0x1a, byte(i>>24), byte(i>>16), byte(i>>8), byte(i), 0x00)
		}
		return unknownFieldWith(b)
	}
	intSlice := func(n int) []byte { // AssignedCores of WorkflowProgress
		b := []byte{0xa1, 0x0b, 0x9a, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
		return append(b, make([]byte, n)...)
	}
	cases := []struct {
		name string
		typ  MsgType
		data []byte
		ok   bool
	}{
		{"array at limit", TypePing, array(maxArrayElements), true},
		{"array over limit", TypePing, array(maxArrayElements + 1), false},
		{"map at limit", TypePing, mapOf(maxMapPairs), true},
		{"map over limit", TypePing, mapOf(maxMapPairs + 1), false},
		{"known slice over limit", TypeWorkflowProgress, intSlice(maxArrayElements + 1), false},
	}
	for _, tc := range cases {
		_, err := Decode(tc.typ, tc.data)
		if tc.ok && err != nil {
			t.Errorf("%s: refused: %v", tc.name, err)
		}
		if !tc.ok && CodeOf(err) != CodeMalformed {
			t.Errorf("%s: err = %v, want CodeMalformed", tc.name, err)
		}
	}
}

func TestDecodeRefusesOversized(t *testing.T) {
	// Garbage that a decoder would call malformed: being told "too large"
	// proves the size check runs before any decoding.
	big := bytes.Repeat([]byte{0xff}, MaxMessageSize+1)
	m, err := Decode(TypePing, big)
	if m != nil || !errors.Is(err, ErrTooLarge) || CodeOf(err) != CodeTooLarge {
		t.Errorf("Decode(%d bytes) = %v, %v; want ErrTooLarge with CodeTooLarge", len(big), m, err)
	}
	if err := Unmarshal(big, new(Ping)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Unmarshal(%d bytes) = %v, want ErrTooLarge", len(big), err)
	}

	// Exactly MaxMessageSize is fine.
	overhead := len(mustMarshal(t, &Ping{Seq: 1, Payload: make([]byte, 1<<16)})) - 1<<16
	p := &Ping{Seq: 1, Payload: bytes.Repeat([]byte{7}, MaxMessageSize-overhead)}
	b := mustMarshal(t, p)
	if len(b) != MaxMessageSize {
		t.Fatalf("built %d bytes, want %d", len(b), MaxMessageSize)
	}
	got, err := Decode(TypePing, b)
	if err != nil || !reflect.DeepEqual(got, p) {
		t.Errorf("message of exactly MaxMessageSize: err %v", err)
	}
	// One byte more (a trailing byte) is refused for size, not for the trailer.
	if _, err := Decode(TypePing, append(b, 0)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("MaxMessageSize+1: err = %v, want ErrTooLarge", err)
	}
}

// ---- the typed error -------------------------------------------------------------

func TestErrorIsError(t *testing.T) {
	var _ error = (*Error)(nil)
	cases := []struct {
		e    *Error
		want string
	}{
		{&Error{Code: CodeNoQuorum}, "no_quorum"},
		{&Error{Code: CodeMalformed, Message: "bad"}, "malformed: bad"},
		{&Error{Code: CodeRateLimited, Message: "slow down", RetryAfter: 2 * time.Second}, "rate_limited: slow down (retry after 2s)"},
		{&Error{Code: CodeNotLeader, Leader: "m2", LeaderAddr: "10.0.0.2:7000"}, "not_leader (leader m2 at 10.0.0.2:7000)"},
		{&Error{Code: 999}, "code(999)"},
		{Errorf(CodeNotFound, "job %q", "j1"), `not_found: job "j1"`},
	}
	for _, tc := range cases {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}

func TestCodeStrings(t *testing.T) {
	seen := map[string]Code{}
	for c := CodeMalformed; c <= CodeRejected; c++ {
		s := c.String()
		if strings.HasPrefix(s, "code(") {
			t.Errorf("Code %d has no name", c)
		}
		if prev, dup := seen[s]; dup {
			t.Errorf("codes %d and %d share the name %q", prev, c, s)
		}
		seen[s] = c
	}
	if got := CodeUnknown.String(); got != "code(0)" {
		t.Errorf("CodeUnknown.String() = %q", got)
	}
}

func TestErrorsIs(t *testing.T) {
	sentinels := map[Code]*Error{
		CodeMalformed: ErrMalformed, CodeUnauthenticated: ErrUnauthenticated, CodeRateLimited: ErrRateLimited,
		CodeNotLeader: ErrNotLeader, CodeStaleFence: ErrStaleFence, CodeNoQuorum: ErrNoQuorum,
		CodeUnavailable: ErrUnavailable, CodeNoHandler: ErrNoHandler,
	}
	for code, sentinel := range sentinels {
		err := &Error{Code: code, Message: "details", RetryAfter: time.Second, Leader: "x"}
		wrapped := fmt.Errorf("call peer: %w", err)
		for _, e := range []error{err, wrapped} {
			if !errors.Is(e, sentinel) {
				t.Errorf("errors.Is(%v, sentinel %s) = false", e, code)
			}
			for other, s := range sentinels {
				if other != code && errors.Is(e, s) {
					t.Errorf("errors.Is(%v, sentinel %s) = true", e, other)
				}
			}
			if got := CodeOf(e); got != code {
				t.Errorf("CodeOf(%v) = %s, want %s", e, got, code)
			}
		}
		// A target with a message is not a code sentinel.
		if errors.Is(err, &Error{Code: code, Message: "other"}) {
			t.Errorf("matched a target with a different message")
		}
	}
	if !errors.Is(fmt.Errorf("x: %w", &Error{Code: CodeRateLimited, Message: "m"}), &Error{Code: CodeRateLimited}) {
		t.Error("errors.Is against an ad-hoc code-only target failed")
	}
	if CodeOf(nil) != CodeUnknown || CodeOf(errors.New("plain")) != CodeUnknown {
		t.Error("CodeOf of a non-wire error is not CodeUnknown")
	}

	// The error survives the wire as a message.
	sent := &Error{Code: CodeRateLimited, Message: "slow down", RetryAfter: 1500 * time.Millisecond}
	got, err := Decode(TypeError, mustMarshal(t, sent))
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(got.(*Error), ErrRateLimited) || !reflect.DeepEqual(got, sent) {
		t.Errorf("decoded error %#v, want %#v", got, sent)
	}
}

func TestTerminalStatuses(t *testing.T) {
	jobs := map[JobStatus]bool{
		JobSubmitted: false, JobQueued: false, JobDispatching: false, JobRunning: false, JobCompleting: false,
		JobCompleted: true, JobFailed: true, JobCancelled: true, JobTimeout: true, "": false, "bogus": false,
	}
	for s, want := range jobs {
		if s.Terminal() != want {
			t.Errorf("JobStatus(%q).Terminal() = %v", s, !want)
		}
	}
	wfs := map[WorkflowStatus]bool{
		WorkflowPending: false, WorkflowAssigned: false, WorkflowRunning: false,
		WorkflowCompleted: true, WorkflowFailed: true, WorkflowCancelled: true, "": false,
	}
	for s, want := range wfs {
		if s.Terminal() != want {
			t.Errorf("WorkflowStatus(%q).Terminal() = %v", s, !want)
		}
	}
}

// The key-id fields were appended to the heartbeats after release: their
// CBOR keys must stay 12 and 13 so mixed-version clusters keep decoding each
// other (an older node ignores them; a newer one reads zero from an older).
func TestHeartbeatKeyIDTags(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  Message
	}{
		{"worker", &WorkerHeartbeat{NodeID: "w1", SendKeyID: 0xa1b2c3d4, AcceptKeyIDs: []uint32{0xa1b2c3d4, 7}}},
		{"manager", &ManagerHeartbeat{NodeID: "m1", SendKeyID: 0xa1b2c3d4, AcceptKeyIDs: []uint32{0xa1b2c3d4, 7}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Marshal(tc.msg)
			if err != nil {
				t.Fatal(err)
			}
			var raw map[uint64]any
			if err := cbor.Unmarshal(b, &raw); err != nil {
				t.Fatal(err)
			}
			if raw[12] != uint64(0xa1b2c3d4) {
				t.Fatalf("key 12 = %#v, want the send key id", raw[12])
			}
			if ids, ok := raw[13].([]any); !ok || len(ids) != 2 || ids[1] != uint64(7) {
				t.Fatalf("key 13 = %#v, want the accepted key ids", raw[13])
			}
		})
	}
}

// A batch call's result becomes one reply per item: each item's own answer
// when the ack holds one per item, the call's failure (or what is wrong with
// the ack) for every item otherwise.
func TestBatchReplies(t *testing.T) {
	refused := &Error{Code: CodeRejected, Message: "no room"}
	dispatchAck := &WorkflowDispatchAck{WorkflowID: "w1", Accepted: true}
	progressAck := &ProgressAck{WorkflowID: "w2"}
	down := errors.New("connection lost")
	for _, tc := range []struct {
		name     string
		n        int
		resp     Message
		err      error
		wantMsgs []Message
		wantErrs []string // substrings; "" for none
	}{
		{"dispatch answers in order", 2,
			&WorkflowDispatchBatchAck{Answers: []DispatchAnswer{{Ack: dispatchAck}, {Err: refused}}}, nil,
			[]Message{dispatchAck, nil}, []string{"", "no room"}},
		{"progress answers", 1, &ProgressBatchAck{Answers: []ProgressAnswer{{Ack: progressAck}}}, nil,
			[]Message{progressAck}, []string{""}},
		{"an answer with neither", 1, &ProgressBatchAck{Answers: []ProgressAnswer{{}}}, nil,
			[]Message{nil}, []string{"neither ack nor error"}},
		{"too few answers", 2, &ProgressBatchAck{Answers: []ProgressAnswer{{Ack: progressAck}}}, nil,
			[]Message{nil, nil}, []string{"1 answers to a batch of 2", "1 answers to a batch of 2"}},
		{"not a batch ack", 2, progressAck, nil,
			[]Message{nil, nil}, []string{"unexpected reply *wire.ProgressAck", "unexpected reply *wire.ProgressAck"}},
		{"the call failed", 2, nil, down,
			[]Message{nil, nil}, []string{"connection lost", "connection lost"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := BatchReplies(tc.n, tc.resp, tc.err)
			if len(got) != tc.n {
				t.Fatalf("%d replies for %d items", len(got), tc.n)
			}
			for i, r := range got {
				if r.Msg != tc.wantMsgs[i] {
					t.Errorf("item %d: reply %v, want %v", i, r.Msg, tc.wantMsgs[i])
				}
				switch want := tc.wantErrs[i]; {
				case want == "" && r.Err != nil:
					t.Errorf("item %d: error %v, want none", i, r.Err)
				case want != "" && (r.Err == nil || !strings.Contains(r.Err.Error(), want)):
					t.Errorf("item %d: error %v, want one saying %q", i, r.Err, want)
				}
			}
		})
	}
}
