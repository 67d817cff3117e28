package workflow

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"tempest/wire"
)

func validHTTPParams() HTTPParams {
	return HTTPParams{
		VUs:        8,
		Iterations: 100,
		Steps: []HTTPStep{
			{Name: "root", Method: "GET", URL: "http://127.0.0.1:8080/"},
			{Name: "post", Method: "POST", URL: "https://example.com/api?x=1", Headers: map[string]string{"Content-Type": "application/json"}, Body: `{}`, ExpectStatus: []int{201}},
		},
	}
}

func TestHTTPParamsValidate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*HTTPParams)
		want   string // "path: message" fragment; empty means valid
	}{
		{"valid", func(*HTTPParams) {}, ""},
		{"valid duration", func(p *HTTPParams) { p.Iterations, p.Duration = 0, 5*time.Second }, ""},
		{"zero vus", func(p *HTTPParams) { p.VUs = 0 }, "vus: must be between 1 and 100000, got 0"},
		{"too many vus", func(p *HTTPParams) { p.VUs = MaxVUs + 1 }, "vus: must be between 1 and 100000, got 100001"},
		{"neither duration nor iterations", func(p *HTTPParams) { p.Iterations = 0 }, "duration: one of duration or iterations is required"},
		{"both", func(p *HTTPParams) { p.Duration = time.Second }, "iterations: cannot be combined with duration"},
		{"negative duration", func(p *HTTPParams) { p.Iterations, p.Duration = 0, -time.Second }, "duration: must be greater than 0, got -1s"},
		{"negative iterations", func(p *HTTPParams) { p.Iterations = -3 }, "iterations: must be greater than 0, got -3"},
		{"too long", func(p *HTTPParams) { p.Iterations, p.Duration = 0, 25*time.Hour }, "duration: must be at most 24h, got 25h"},
		{"too many iterations", func(p *HTTPParams) { p.Iterations = MaxIterations + 1 }, "iterations: must be at most"},
		{"negative timeout", func(p *HTTPParams) { p.Timeout = -time.Second }, "request_timeout: must be between 0"},
		{"huge timeout", func(p *HTTPParams) { p.Timeout = time.Hour }, "request_timeout: must be between 0"},
		{"no steps", func(p *HTTPParams) { p.Steps = nil }, "steps: must have between 1 and 64 steps, got 0"},
		{"too many steps", func(p *HTTPParams) {
			for i := range 65 {
				p.Steps = append(p.Steps, HTTPStep{Name: strings.Repeat("s", i+10), URL: "http://x/"})
			}
		}, "steps: must have between 1 and 64 steps, got 67"},
		{"empty step name", func(p *HTTPParams) { p.Steps[1].Name = "" }, "steps[1].name: must not be empty"},
		{"control char in name", func(p *HTTPParams) { p.Steps[1].Name = "a\nb" }, "steps[1].name: must be printable"},
		{"duplicate step", func(p *HTTPParams) { p.Steps[1].Name = "root" }, `steps[1].name: duplicate step name "root" (also steps[0])`},
		{"bad method", func(p *HTTPParams) { p.Steps[0].Method = "GE T" }, `steps[0].method: must be an HTTP method`},
		{"no url", func(p *HTTPParams) { p.Steps[0].URL = "" }, "steps[0].url: is required"},
		{"relative url", func(p *HTTPParams) { p.Steps[0].URL = "/index.html" }, "steps[0].url: must be an http:// or https:// URL"},
		{"ftp url", func(p *HTTPParams) { p.Steps[0].URL = "ftp://x/" }, "steps[0].url: must be an http:// or https:// URL"},
		{"no host", func(p *HTTPParams) { p.Steps[0].URL = "http:///x" }, "steps[0].url: must be an http:// or https:// URL"},
		{"bad header name", func(p *HTTPParams) { p.Steps[1].Headers["X Bad"] = "1" }, `steps[1].headers["X Bad"]: is not a valid header name`},
		{"header injection", func(p *HTTPParams) { p.Steps[1].Headers["X-Ok"] = "a\r\nHost: evil" }, `steps[1].headers.X-Ok: value must be`},
		{"huge body", func(p *HTTPParams) { p.Steps[1].Body = strings.Repeat("x", maxBodyLen+1) }, "steps[1].body: must be at most"},
		{"bad status", func(p *HTTPParams) { p.Steps[1].ExpectStatus = []int{200, 99} }, "steps[1].expect_status[1]: must be an HTTP status between 100 and 599, got 99"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := validHTTPParams()
			tc.mutate(&p)
			err := p.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("valid params refused: %v", err)
				}
				return
			}
			var fes FieldErrors
			if !errors.As(err, &fes) {
				t.Fatalf("error %v is not FieldErrors", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestHTTPParamsValidateReportsEveryProblem(t *testing.T) {
	p := HTTPParams{Steps: []HTTPStep{{}, {Name: "x", URL: "nope"}}}
	var fes FieldErrors
	if !errors.As(p.Validate(), &fes) {
		t.Fatal("not FieldErrors")
	}
	var paths []string
	for _, fe := range fes {
		paths = append(paths, fe.Path)
	}
	want := "vus duration steps[0].name steps[0].url steps[1].url"
	if got := strings.Join(paths, " "); got != want {
		t.Fatalf("paths %q, want %q", got, want)
	}
}

func TestSleepParamsValidate(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Second:        "",
		MaxRunDuration:     "",
		0:                  "duration: must be greater than 0, got 0s",
		-time.Second:       "duration: must be greater than 0, got -1s",
		MaxRunDuration + 1: "duration: must be at most 24h",
	} {
		err := (&SleepParams{Duration: d}).Validate()
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("duration %s: error %v, want %q", d, err, want)
		}
	}
}

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := wire.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeParamsFromTheNetwork(t *testing.T) {
	reg := DefaultRegistry()
	typ, _ := reg.Lookup("http")
	good := validHTTPParams()
	p, err := typ.DecodeParams(mustMarshal(t, &good))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.(*HTTPParams); got.VUs != 8 || len(got.Steps) != 2 || got.Steps[1].Headers["Content-Type"] != "application/json" {
		t.Fatalf("decoded %+v", got)
	}

	// A newer manager may add keys; this worker ignores them.
	withFuture := mustMarshal(t, map[int]any{1: 2, 3: 10, 5: []map[int]any{{1: "a", 3: "http://x/"}}, 42: "future"})
	if _, err := typ.DecodeParams(withFuture); err != nil {
		t.Fatalf("unknown key refused: %v", err)
	}

	bad := good
	bad.VUs = 0
	for name, data := range map[string][]byte{
		"garbage":       []byte("not cbor"),
		"empty":         nil,
		"duplicate key": {0xa2, 0x01, 0x01, 0x01, 0x02},
		"oversized":     make([]byte, MaxParamsSize+1),
		"wrong type":    mustMarshal(t, map[int]any{1: "eight"}),
		"invalid":       mustMarshal(t, &bad),
	} {
		if _, err := typ.DecodeParams(data); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	_, err = typ.DecodeParams(mustMarshal(t, &bad))
	var fes FieldErrors
	if !errors.As(err, &fes) || fes[0].Path != "vus" {
		t.Fatalf("invalid params error %v does not carry FieldErrors for vus", err)
	}
}

func TestRegistry(t *testing.T) {
	reg := DefaultRegistry()
	if got := strings.Join(reg.Names(), ","); got != "grpc,http,sleep,websocket" {
		t.Fatalf("names %q", got)
	}
	if err := reg.Register(SleepType{}); err == nil {
		t.Fatal("second sleep type registered")
	}
	if err := NewRegistry().Register(SleepType{}); err != nil {
		t.Fatalf("registries must not share state: %v", err)
	}

	sleep := mustMarshal(t, &SleepParams{Duration: time.Second})
	good := wire.WorkflowSpec{Name: "nap", Type: "sleep", Cores: 1, Params: sleep}
	if err := reg.Validate(good); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.New(good); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		mutate func(*wire.WorkflowSpec)
		want   string
	}{
		"unknown type": {func(s *wire.WorkflowSpec) { s.Type = "mqtt" }, `unknown workflow type "mqtt" (known: grpc, http, sleep, websocket)`},
		"no cores":     {func(s *wire.WorkflowSpec) { s.Cores = 0 }, "cores must be between 1 and 1024, got 0"},
		"no name":      {func(s *wire.WorkflowSpec) { s.Name = "" }, "must not be empty"},
		"bad params":   {func(s *wire.WorkflowSpec) { s.Params = mustMarshal(t, &SleepParams{}) }, "duration: must be greater than 0"},
	} {
		spec := good
		tc.mutate(&spec)
		for _, err := range []error{reg.Validate(spec), func() error { _, err := reg.New(spec); return err }()} {
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: error %v, want %q", name, err, tc.want)
			}
		}
	}
	spec := good
	spec.Type = "mqtt"
	if _, err := reg.New(spec); !errors.Is(err, ErrUnknownType) {
		t.Errorf("unknown type error %v is not ErrUnknownType", err)
	}
}

// Fields over a hand-built tree: lines, unknown keys and the suppression
// of Validate complaints about fields that failed to read.
func TestFields(t *testing.T) {
	scalar := func(line int, v any, text string) *Node {
		return &Node{Kind: ScalarNode, Line: line, Value: v, Text: text}
	}
	root := &Node{Kind: MapNode, Line: 3, Fields: []Field{
		{Key: "vus", Line: 4, Value: scalar(4, "eight", "eight")},
		{Key: "duraton", Line: 5, Value: scalar(5, "5s", "5s")},
		{Key: "steps", Line: 6, Value: &Node{Kind: ListNode, Line: 7, Items: []*Node{
			{Kind: MapNode, Line: 7, Fields: []Field{
				{Key: "name", Line: 7, Value: scalar(7, "root", "root")},
				{Key: "url", Line: 8, Value: scalar(8, int64(5), "5")},
				{Key: "headers", Line: 9, Value: &Node{Kind: MapNode, Line: 10, Fields: []Field{
					{Key: "X Y", Line: 10, Value: scalar(10, "v", "v")},
				}}},
			}},
		}}},
	}}
	f := NewFields("workflows[0]", root)
	HTTPType{}.ParseParams(f)
	var got []string
	for _, p := range f.Finish() {
		got = append(got, strings.Join([]string{strconv.Itoa(p.Line), p.Path, p.Message}, " | "))
	}
	want := []string{
		"3 | workflows[0].duration | one of duration or iterations is required, greater than 0",
		"4 | workflows[0].vus | must be an integer, got \"eight\"",
		"5 | workflows[0] | unknown key \"duraton\" (did you mean \"duration\"?)",
		"8 | workflows[0].steps[0].url | must be an http:// or https:// URL with a host, got \"5\"",
		"10 | workflows[0].steps[0].headers[\"X Y\"] | is not a valid header name",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestPathsRoundTrip(t *testing.T) {
	p := JoinPath(IndexPath(JoinPath(IndexPath("workflows", 2), "steps"), 11), "headers")
	p = JoinPath(p, `X-Trace.Id]"`)
	if want := `workflows[2].steps[11].headers["X-Trace.Id]\""]`; p != want {
		t.Fatalf("path %s, want %s", p, want)
	}
	var parts []string
	for _, el := range splitPath(p) {
		if el.key != nil {
			parts = append(parts, "k:"+*el.key)
		} else {
			parts = append(parts, "i:"+strconv.Itoa(el.index))
		}
	}
	if got := strings.Join(parts, " "); got != `k:workflows i:2 k:steps i:11 k:headers k:X-Trace.Id]"` {
		t.Fatalf("split %s", got)
	}
}
