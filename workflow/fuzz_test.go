package workflow

import (
	"math"
	"math/rand/v2"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"tempest/wire"
)

// FuzzDecodeHistogram feeds DecodeHistogram what a hostile peer could put in
// wire.StepStats.Histogram. It must never panic or allocate without bound,
// and whatever it accepts must be a histogram that encodes back to an
// equal one.
func FuzzDecodeHistogram(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 100, 5000} {
		h := NewHistogram()
		for range n {
			h.Record(latencySample(rng))
		}
		b, err := h.Encode()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, buckets := range [][]byte{uvarints(5, 0), uvarints(5, 1, 0, 1), uvarints(uint64(highestMicros), 1), uvarints(1, 1<<63), uvarints(0, 1, 1, 2, 1000, 3), {0x80}} {
		f.Add(encodeWire(f, geometry(buckets)))
	}
	f.Add([]byte{})
	f.Add([]byte{0xa0})
	f.Add([]byte{0xbf, 0xff})

	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := DecodeHistogram(data)
		if err != nil {
			if h != nil {
				t.Fatal("histogram returned with an error")
			}
			return
		}
		if h.Count() < 0 {
			t.Fatalf("negative count %d", h.Count())
		}
		b, err := h.Encode()
		if err != nil {
			t.Fatalf("accepted histogram does not encode: %v", err)
		}
		again, err := DecodeHistogram(b)
		if err != nil {
			t.Fatalf("re-encoded histogram does not decode: %v", err)
		}
		if !sameBuckets(again, h) {
			t.Fatal("histogram changed across encode and decode")
		}
		// Merging accepted input must not panic either (managers do it).
		if _, err := MergeStepStats([]wire.StepStats{{StepName: "a", Histogram: data}}, []wire.StepStats{{StepName: "a", Histogram: b}}); err != nil && h.Count() <= math.MaxInt64/2 {
			t.Fatalf("merge of an accepted histogram with itself failed: %v", err)
		}
	})
}

// FuzzParseDataCSV: a data file is whatever the user (or an API client)
// uploads; parsing must end in a table or an error, never a panic, and a
// table's rows all have the header's width.
func FuzzParseDataCSV(f *testing.F) {
	for _, s := range []string{"user,pass\na,b\nc,d\n", "a\n", "", "a,a\n1,2\n", "\"x\ny\",z\n1,2\n", "a,b\n1\n", "\xff,b\n1,2\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		table, err := parseDataCSV("f.csv", text)
		if err != nil {
			return
		}
		for i, row := range table.rows {
			if len(row) != len(table.columns) {
				t.Fatalf("row %d has %d fields, header %d", i, len(row), len(table.columns))
			}
		}
	})
}

// FuzzFlowResponse feeds what a target may answer to the captures, checks
// and cookie jar: they must never panic, and a captured value must be one a
// later request can carry in a header (no CR, LF or other control byte).
func FuzzFlowResponse(f *testing.F) {
	f.Add([]byte(`{"data":{"token":"abc"}}`), "X-Id", "1\r\nEvil: yes", "session=s; Path=/; Max-Age=60")
	f.Add([]byte(`{"data":{"token":"a\nb"}}`), "Content-Type", "application/json", "=; Domain=co.uk")
	f.Add([]byte("csrf=deadbeef;"), "", "", "")
	f.Fuzz(func(t *testing.T, body []byte, hname, hvalue, setCookie string) {
		head := newRespHead()
		head.reset(true)
		head.field([]byte(hname), []byte(hvalue))
		resp := &flowResponse{status: 200, head: head, body: body, cookies: []string{setCookie}}
		captures := []preparedCapture{
			{HTTPCapture: HTTPCapture{Name: "j", Source: CaptureJSON, Expr: "data.token"}},
			{HTTPCapture: HTTPCapture{Name: "r", Source: CaptureRegex, Expr: `csrf=([^;]*)`}, re: regexp.MustCompile(`csrf=([^;]*)`)},
			{HTTPCapture: HTTPCapture{Name: "h", Source: CaptureHeader, Expr: hname}},
			{HTTPCapture: HTTPCapture{Name: "c", Source: CaptureCookie, Expr: "session"}},
		}
		for _, c := range captures {
			if v, ok := c.capture(resp); ok && !validHeaderValue(v) {
				t.Fatalf("capture %s took %q, which no header can carry", c.Name, v)
			}
		}
		for _, c := range []preparedCheck{
			{HTTPCheck: HTTPCheck{Name: "a", Kind: CheckJSON, Path: "data.token", Op: OpExists}},
			{HTTPCheck: HTTPCheck{Name: "b", Kind: CheckHeader, Path: hname, Op: OpMatches, Value: "json"}, re: regexp.MustCompile("json")},
			{HTTPCheck: HTTPCheck{Name: "c", Kind: CheckBodyContains, Value: "abc"}},
		} {
			c.pass(resp)
		}
		var fl vuFlow
		u, _ := url.Parse("https://shop.example/a/b")
		fl.storeCookies(u, []string{setCookie})
		if fl.jar != nil {
			for _, ck := range fl.jar.Cookies(u) {
				if !validHeaderValue(ck.Name + "=" + ck.Value) {
					t.Fatalf("the jar would send %q", ck.Name+"="+ck.Value)
				}
			}
		}
	})
}

// FuzzCompileProto feeds compileProto what a submitter can upload as a grpc
// workflow's .proto file, which every manager and worker compiles again. It
// must never panic; a file it accepts must name every method it lists.
func FuzzCompileProto(f *testing.F) {
	f.Add([]byte("syntax = \"proto3\";\npackage p;\nmessage In { string a = 1; }\nservice S { rpc M (In) returns (stream In); }\n"))
	f.Add([]byte("syntax = \"proto3\";\nimport \"google/protobuf/empty.proto\";\nservice S { rpc M (google.protobuf.Empty) returns (google.protobuf.Empty); }\n"))
	f.Add([]byte("syntax = \"proto2\";\nmessage {"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, src []byte) {
		if len(src) > MaxProtoFile {
			return
		}
		svc, err := compileProto("fuzz.proto", src)
		if err != nil {
			return
		}
		for _, name := range svc.methodNames() {
			if _, err := svc.method("/" + name); err != nil && !strings.Contains(err.Error(), "streams from the client") {
				t.Fatalf("listed method %s not found: %v", name, err)
			}
		}
	})
}
