package jobfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"tempest/wire"
	"tempest/workflow"
)

// minimal is the job file from the issue, verbatim.
const minimal = `name: smoke
timeout: 60s
workflows:
  - name: get-root
    type: http
    cores: 1
    vus: 8
    duration: 5s          # or: iterations: 2000
    steps:
      - {name: root, method: GET, url: "http://127.0.0.1:8080/"}
  - {name: nap, type: sleep, cores: 1, duration: 3s}
`

func parse(t *testing.T, src string) (*wire.JobSubmission, error) {
	t.Helper()
	return Parse([]byte(src), "smoke.yaml", workflow.DefaultRegistry())
}

func mustParse(t *testing.T, src string) *wire.JobSubmission {
	t.Helper()
	sub, err := parse(t, src)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return sub
}

// decodeParams decodes a spec's params back through the registry, as a
// worker will.
func decodeParams(t *testing.T, spec wire.WorkflowSpec) workflow.Params {
	t.Helper()
	typ, ok := workflow.DefaultRegistry().Lookup(spec.Type)
	if !ok {
		t.Fatalf("type %q not registered", spec.Type)
	}
	p, err := typ.DecodeParams(spec.Params)
	if err != nil {
		t.Fatalf("workflow %s: decode params: %v", spec.Name, err)
	}
	return p
}

func TestParseMinimalJobFile(t *testing.T) {
	sub := mustParse(t, minimal)
	if sub.JobID != "" {
		t.Fatalf("job id %q assigned; the manager does that", sub.JobID)
	}
	if sub.Name != "smoke" || sub.Timeout != 60*time.Second || sub.DatacenterCount != 0 || sub.Datacenters != nil {
		t.Fatalf("submission %+v", sub)
	}
	if len(sub.Workflows) != 2 {
		t.Fatalf("%d workflows, want 2", len(sub.Workflows))
	}
	get, nap := sub.Workflows[0], sub.Workflows[1]
	if get.Name != "get-root" || get.Type != "http" || get.Cores != 1 || get.Timeout != 0 {
		t.Fatalf("get-root spec %+v", get)
	}
	wantHTTP := &workflow.HTTPParams{VUs: 8, Duration: 5 * time.Second, Steps: []workflow.HTTPStep{
		{Name: "root", Method: "GET", URL: "http://127.0.0.1:8080/"},
	}}
	if got := decodeParams(t, get); !reflect.DeepEqual(got, wantHTTP) {
		t.Fatalf("get-root params %+v, want %+v", got, wantHTTP)
	}
	if nap.Name != "nap" || nap.Type != "sleep" || nap.Cores != 1 {
		t.Fatalf("nap spec %+v", nap)
	}
	if got := decodeParams(t, nap); !reflect.DeepEqual(got, &workflow.SleepParams{Duration: 3 * time.Second}) {
		t.Fatalf("nap params %+v", got)
	}
	// The registry accepts what the parser produced, as a manager checks.
	for _, spec := range sub.Workflows {
		if err := workflow.DefaultRegistry().Validate(spec); err != nil {
			t.Fatal(err)
		}
	}
	// The submission crosses the wire intact.
	var back wire.JobSubmission
	b, err := wire.Marshal(sub)
	if err != nil {
		t.Fatal(err)
	}
	if err := wire.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(&back, sub) {
		t.Fatalf("round trip: %v\n%+v\n%+v", err, &back, sub)
	}
}

func TestParseIterationsAndDefaults(t *testing.T) {
	sub := mustParse(t, `name: defaults
workflows:
  - name: w
    type: http
    iterations: 2000
    request_timeout: 2s
    steps:
      - name: create
        method: POST
        url: https://api.example/items
        headers: {Content-Type: application/json, X-Count: 5}
        body: '{"a": 1}'
        expect_status: 201
      - name: list
        url: https://api.example/items
        expect_status: [200, 304]
`)
	if sub.Timeout != DefaultTimeout {
		t.Fatalf("timeout %s, want the default %s", sub.Timeout, DefaultTimeout)
	}
	spec := sub.Workflows[0]
	if spec.Cores != DefaultCores || spec.Timeout != 0 {
		t.Fatalf("spec %+v, want default cores and no workflow timeout", spec)
	}
	want := &workflow.HTTPParams{VUs: 1, Iterations: 2000, Timeout: 2 * time.Second, Steps: []workflow.HTTPStep{
		{Name: "create", Method: "POST", URL: "https://api.example/items",
			Headers: map[string]string{"Content-Type": "application/json", "X-Count": "5"}, Body: `{"a": 1}`, ExpectStatus: []int{201}},
		{Name: "list", Method: "GET", URL: "https://api.example/items", ExpectStatus: []int{200, 304}},
	}}
	if got := decodeParams(t, spec); !reflect.DeepEqual(got, want) {
		t.Fatalf("params %+v, want %+v", got, want)
	}
}

func TestParseDatacenters(t *testing.T) {
	const wfs = "\nworkflows: [{name: n, type: sleep, duration: 1s}]\n"
	sub := mustParse(t, "name: a\ndatacenters: 2"+wfs)
	if sub.DatacenterCount != 2 || sub.Datacenters != nil {
		t.Fatalf("count form: %+v", sub)
	}
	sub = mustParse(t, "name: a\ndatacenters: [us-east, eu-west]"+wfs)
	if sub.DatacenterCount != 0 || !reflect.DeepEqual(sub.Datacenters, []string{"us-east", "eu-west"}) {
		t.Fatalf("names form: %+v", sub)
	}
}

// The JSON form of the minimal file parses to the same submission; tabs,
// which YAML forbids for indentation, are fine in JSON.
func TestParseJSON(t *testing.T) {
	doc := map[string]any{
		"name":    "smoke",
		"timeout": "60s",
		"workflows": []any{
			map[string]any{"name": "get-root", "type": "http", "cores": 1, "vus": 8, "duration": "5s",
				"steps": []any{map[string]any{"name": "root", "method": "GET", "url": "http://127.0.0.1:8080/"}}},
			map[string]any{"name": "nap", "type": "sleep", "cores": 1.0, "duration": "3s"},
		},
	}
	for _, indent := range []string{"", "  ", "\t"} {
		src, err := json.MarshalIndent(doc, "", indent)
		if err != nil {
			t.Fatal(err)
		}
		got := mustParse(t, string(src))
		if want := mustParse(t, minimal); !reflect.DeepEqual(got, want) {
			t.Fatalf("indent %q: JSON gives %+v, YAML %+v", indent, got, want)
		}
	}
	// JSON problems have lines too.
	_, err := parse(t, "{\n  \"name\": \"x\",\n  \"workflows\": [\n    {\"name\": \"w\", \"type\": \"sleep\", \"duration\": 5}\n  ]\n}\n")
	wantErr := `smoke.yaml:4: workflows[0].duration: must be a duration such as "5s" or "1m30s", got 5`
	if err == nil || err.Error() != wantErr {
		t.Fatalf("error %v, want %s", err, wantErr)
	}
}

// shards: N gives N specs of one name, numbered, whose VUs add up.
func TestParseShards(t *testing.T) {
	sub := mustParse(t, strings.Replace(minimal, "vus: 8", "vus: 8\n    shards: 3", 1))
	var http []wire.WorkflowSpec
	for _, w := range sub.Workflows {
		if w.Type == "http" {
			http = append(http, w)
		}
	}
	if len(http) != 3 {
		t.Fatalf("%d http specs, want 3 shards", len(http))
	}
	vus := 0
	for i, w := range http {
		if w.Name != "get-root" || w.Shard != i+1 || w.Shards != 3 {
			t.Fatalf("shard %d = %s %d/%d", i, w.Name, w.Shard, w.Shards)
		}
		p, err := workflow.HTTPType{}.DecodeParams(w.Params)
		if err != nil {
			t.Fatal(err)
		}
		vus += p.(*workflow.HTTPParams).VUs
	}
	if vus != 8 {
		t.Fatalf("shards have %d VUs in all, want 8", vus)
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name string
		src  string
		want []string // every line of Error(), in order
	}{
		{
			name: "vus out of range",
			src:  strings.Replace(minimal, "vus: 8", "vus: 0", 1),
			want: []string{"smoke.yaml:7: workflows[0].vus: must be between 1 and 100000, got 0"},
		},
		{
			name: "misspelt key",
			src:  strings.Replace(minimal, "duration: 5s ", "duraton: 5s ", 1),
			want: []string{
				"smoke.yaml:4: workflows[0].duration: one of duration or iterations is required, greater than 0",
				`smoke.yaml:8: workflows[0]: unknown key "duraton" (did you mean "duration"?)`,
			},
		},
		{
			name: "unknown type",
			src:  strings.Replace(minimal, "type: sleep", "type: mqtt", 1),
			want: []string{`smoke.yaml:11: workflows[1].type: unknown workflow type "mqtt" (known: grpc, http, sleep, websocket)`},
		},
		{
			name: "sleep cannot be sharded",
			src:  strings.Replace(minimal, "type: sleep", "type: sleep, shards: 2", 1),
			want: []string{`smoke.yaml:11: workflows[1].shards: a sleep workflow cannot be split over workers`},
		},
		{
			name: "more shards than vus",
			src:  strings.Replace(minimal, "vus: 8", "vus: 8\n    shards: 9", 1),
			want: []string{`smoke.yaml:8: workflows[0].shards: 9 is more than vus: 8; every shard needs a VU`},
		},
		{
			name: "unknown top-level key",
			src:  minimal + "thresholds: {p99: 100ms}\n",
			want: []string{`smoke.yaml:12: unknown key "thresholds"`},
		},
		{
			name: "unknown step key",
			src:  strings.Replace(minimal, "method: GET,", "methd: GET,", 1),
			want: []string{`smoke.yaml:10: workflows[0].steps[0]: unknown key "methd" (did you mean "method"?)`},
		},
		{
			name: "missing name and workflows",
			src:  "timeout: 5m\n",
			want: []string{"smoke.yaml:1: name: is required", "smoke.yaml:1: workflows: is required"},
		},
		{
			name: "wrong types",
			src:  "name: [a]\ntimeout: 5\nworkflows: {a: 1}\n",
			want: []string{
				"smoke.yaml:1: name: must be a string, got a list",
				`smoke.yaml:2: timeout: must be a duration such as "5s" or "1m30s", got 5`,
				"smoke.yaml:3: workflows: must be a list, got a mapping",
			},
		},
		{
			name: "empty workflows",
			src:  "name: a\nworkflows: []\n",
			want: []string{"smoke.yaml:2: workflows: must have between 1 and 256 workflows, got 0"},
		},
		{
			name: "workflow problems",
			src: `name: a
timeout: 1m
workflows:
  - {name: a, type: sleep, duration: 1s, cores: 0}
  - {name: a, type: sleep, duration: 1s, timeout: 2m}
  - {type: sleep, duration: 25h}
  - {name: c, duration: 1s}
  - 5
`,
			want: []string{
				"smoke.yaml:4: workflows[0].cores: must be between 1 and 1024, got 0",
				`smoke.yaml:5: workflows[1].timeout: 2m is longer than the job's timeout of 1m`,
				`smoke.yaml:5: workflows[1].name: duplicate workflow name "a" (also workflows[0])`,
				"smoke.yaml:6: workflows[2].name: is required",
				"smoke.yaml:6: workflows[2].duration: must be at most 24h, got 25h",
				"smoke.yaml:7: workflows[3].type: is required",
				"smoke.yaml:8: workflows[4]: must be a mapping, got 5",
			},
		},
		{
			name: "http problems",
			src: `name: a
workflows:
  - name: w
    type: http
    vus: lots
    duration: 5s
    iterations: 10
    request_timeout: 0s
    steps:
      - {name: s, url: "ftp://x/", headers: {"Bad Name": v}, expect_status: [200, 9000]}
      - {name: s, url: "http://x/", method: "G T"}
      - {url: "http://x/"}
`,
			want: []string{
				`smoke.yaml:5: workflows[0].vus: must be an integer, got "lots"`,
				"smoke.yaml:7: workflows[0].iterations: cannot be combined with duration; set one of them",
				"smoke.yaml:8: workflows[0].request_timeout: must be greater than 0, got 0s",
				`smoke.yaml:10: workflows[0].steps[0].url: must be an http:// or https:// URL with a host, got "ftp://x/"`,
				`smoke.yaml:10: workflows[0].steps[0].headers["Bad Name"]: is not a valid header name`,
				"smoke.yaml:10: workflows[0].steps[0].expect_status[1]: must be an HTTP status between 100 and 599, got 9000",
				`smoke.yaml:11: workflows[0].steps[1].name: duplicate step name "s" (also steps[0])`,
				`smoke.yaml:11: workflows[0].steps[1].method: must be an HTTP method such as GET or POST, got "G T"`,
				"smoke.yaml:12: workflows[0].steps[2].name: is required",
			},
		},
		{
			name: "datacenters",
			src:  "name: a\ndatacenters: [x, x, '']\nworkflows: [{name: n, type: sleep, duration: 1s}]\n",
			want: []string{
				`smoke.yaml:2: datacenters[1]: datacenter "x" is listed twice`,
				"smoke.yaml:2: datacenters[2]: must not be empty",
			},
		},
		{
			name: "datacenter count",
			src:  "name: a\ndatacenters: 0\nworkflows: [{name: n, type: sleep, duration: 1s}]\n",
			want: []string{"smoke.yaml:2: datacenters: must be between 1 and 64, got 0"},
		},
		{
			name: "duplicate key",
			src:  "name: a\nname: b\nworkflows: [{name: n, type: sleep, duration: 1s, duration: 2s}]\n",
			want: []string{
				`smoke.yaml:2: duplicate key "name" (first at line 1)`,
				`smoke.yaml:3: workflows[0]: duplicate key "duration" (first at line 3)`,
			},
		},
		{
			name: "syntax error",
			src:  "name: a\nworkflows: [\n",
			want: []string{"smoke.yaml:2: invalid YAML: did not find expected node content"},
		},
		{
			name: "tabs in YAML",
			src:  "name: a\nworkflows:\n\t- name: x\n",
			want: []string{"smoke.yaml:3: invalid YAML: found character that cannot start any token"},
		},
		{
			name: "empty",
			src:  "# nothing here\n",
			want: []string{"smoke.yaml: job file is empty"},
		},
		{
			name: "not a mapping",
			src:  "- name: a\n",
			want: []string{"smoke.yaml:1: job file must be a mapping with name, workflows and optionally timeout and datacenters"},
		},
		{
			name: "two documents",
			src:  minimal + "---\nname: other\n",
			want: []string{"smoke.yaml:12: job file must hold one YAML document; a second one starts here"},
		},
		{
			name: "custom tag",
			src:  "name: !secret a\nworkflows: [{name: n, type: sleep, duration: !!binary aGVsbG8=}]\n",
			want: []string{
				"smoke.yaml:1: name: tag !secret is not supported",
				"smoke.yaml:2: workflows[0].duration: tag !!binary is not supported",
			},
		},
		{
			name: "merge key",
			src:  "name: a\nworkflows: [{<<: {type: sleep}, name: n, type: sleep, duration: 1s}]\n",
			want: []string{"smoke.yaml:2: workflows[0]: merge keys (<<) are not supported"},
		},
		{
			name: "integer overflow",
			src:  "name: a\nworkflows: [{name: n, type: http, vus: 99999999999999999999, iterations: 1, steps: [{name: s, url: 'http://x/'}]}]\n",
			want: []string{"smoke.yaml:2: workflows[0].vus: must be an integer, got 99999999999999999999"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sub, err := parse(t, tc.src)
			if sub != nil {
				t.Fatalf("got a submission despite problems: %+v", sub)
			}
			var jerr *Error
			if !errors.As(err, &jerr) {
				t.Fatalf("error %v (%T) is not *jobfile.Error", err, err)
			}
			if got := strings.Split(err.Error(), "\n"); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}

func TestErrorIsJSONForTheAPI(t *testing.T) {
	_, err := parse(t, strings.Replace(minimal, "vus: 8", "vus: 0", 1))
	var jerr *Error
	if !errors.As(err, &jerr) {
		t.Fatal(err)
	}
	b, _ := json.Marshal(jerr)
	want := `{"file":"smoke.yaml","problems":[{"line":7,"path":"workflows[0].vus","message":"must be between 1 and 100000, got 0"}]}`
	if string(b) != want {
		t.Fatalf("JSON %s, want %s", b, want)
	}
}

// billionLaughs is the classic entity-expansion attack in YAML form: nine
// levels of nine aliases, 9^9 (387 million) strings once expanded.
func billionLaughs() string {
	var b strings.Builder
	b.WriteString("a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n")
	for i := 1; i < 9; i++ {
		prev, cur := string(rune('a'+i-1)), string(rune('a'+i))
		fmt.Fprintf(&b, "%s: &%s [*%s,*%s,*%s,*%s,*%s,*%s,*%s,*%s,*%s]\n", cur, cur, prev, prev, prev, prev, prev, prev, prev, prev, prev)
	}
	return b.String()
}

func TestBillionLaughs(t *testing.T) {
	src := billionLaughs()
	// yaml.v3 itself refuses to expand it when decoding into Go values...
	var v any
	if err := yaml.Unmarshal([]byte(src), &v); err == nil || !strings.Contains(err.Error(), "excessive aliasing") {
		t.Fatalf("yaml.v3 decoded the billion laughs: %v", err)
	}
	// ...and Parse never expands anything: aliases are refused outright.
	_, err := parse(t, src)
	var jerr *Error
	if !errors.As(err, &jerr) || !strings.Contains(err.Error(), "smoke.yaml:1: a: anchors (&a) and aliases are not supported") {
		t.Fatalf("error %v, want aliases refused", err)
	}
}

func TestParseLimits(t *testing.T) {
	big := minimal + "# " + strings.Repeat("x", MaxFileSize) + "\n"
	if _, err := parse(t, big); err == nil || !strings.Contains(err.Error(), "more than the 1048576 allowed") {
		t.Errorf("oversized file: %v", err)
	}
	deep := "name: a\nworkflows: [{name: n, type: sleep, duration: 1s, x: " + strings.Repeat("[", 40) + strings.Repeat("]", 40) + "}]\n"
	if _, err := parse(t, deep); err == nil || !strings.Contains(err.Error(), "nested more than 32 levels deep") {
		t.Errorf("deep nesting: %v", err)
	}
	deeper := strings.Repeat("[", 20000)
	if _, err := parse(t, deeper); err == nil || !strings.Contains(err.Error(), "exceeded max depth") {
		t.Errorf("yaml.v3 depth limit: %v", err)
	}
	// A file of nothing but mistakes is summarised, not listed in full.
	var many strings.Builder
	many.WriteString("name: a\nworkflows: [{name: n, type: sleep, duration: 1s}]\n")
	for i := range 300 {
		fmt.Fprintf(&many, "k%d: 1\n", i)
	}
	_, err := parse(t, many.String())
	var jerr *Error
	if !errors.As(err, &jerr) || len(jerr.Problems) != maxProblems+1 ||
		jerr.Problems[maxProblems].Message != "200 more problems not shown" {
		t.Fatalf("many problems: %d reported", len(jerr.Problems))
	}
	tooMany := "name: a\nworkflows:\n" + strings.Repeat("  - {name: n, type: sleep, duration: 1s}\n", MaxWorkflows+1)
	if _, err := parse(t, tooMany); err == nil || !strings.Contains(err.Error(), "workflows: must have between 1 and 256 workflows, got 257") {
		t.Errorf("too many workflows: %v", err)
	}
}

func TestParseNeedsARegistry(t *testing.T) {
	if _, err := Parse([]byte(minimal), "x", nil); err == nil {
		t.Fatal("parsed without a registry")
	}
}

// Hostile files at the size limit must be refused in bounded time and with
// a bounded report; nothing here asserts timings, but a quadratic path would
// make this test crawl.
func TestParseHostileShapes(t *testing.T) {
	size := MaxFileSize
	if raceEnabled {
		size /= 8
	}
	fill := func(head, item string) string {
		var b strings.Builder
		b.WriteString(head)
		for i := 0; b.Len() < size-len(item)-16; i++ {
			fmt.Fprintf(&b, item, i)
		}
		return b.String()
	}
	for name, src := range map[string]string{
		"many unknown keys":     fill("name: a\nworkflows: [{name: n, type: sleep, duration: 1s}]\n", "durat%d: 1\n"),
		"many workflows":        fill("name: a\nworkflows:\n", "  - {name: n%d, type: sleep, duration: 1s}\n"),
		"many steps":            fill("name: a\nworkflows:\n  - name: w\n    type: http\n    iterations: 1\n    steps:\n", "      - {name: s%d, url: 'http://x/'}\n"),
		"many duplicate keys":   fill("name: a\n", "name: %d\n"),
		"many headers":          fill("name: a\nworkflows: [{name: w, type: http, iterations: 1, steps: [{name: s, url: 'http://x/', headers: {", "h%d: v, "),
		"long key":              "name: a\n" + strings.Repeat("k", MaxFileSize-20) + ": 1\n",
		"many aliases":          fill("a: &a 1\n", "b%d: *a\n"),
		"deep flow":             strings.Repeat("[", MaxFileSize/2) + strings.Repeat("]", MaxFileSize/2-1),
		"many status codes":     fill("name: a\nworkflows: [{name: w, type: http, iterations: 1, steps: [{name: s, url: 'http://x/', expect_status: [", "%d, "),
		"many datacenter names": fill("name: a\ndatacenters: [", "dc%d, "),
	} {
		t.Run(name, func(t *testing.T) {
			if len(src) > MaxFileSize {
				t.Fatalf("test input is %d bytes", len(src))
			}
			start := time.Now()
			_, err := parse(t, src)
			var jerr *Error
			if !errors.As(err, &jerr) {
				t.Fatalf("accepted: %v", err)
			}
			if len(jerr.Problems) > maxProblems+1 || len(err.Error()) > 64<<10 {
				t.Fatalf("report of %d problems, %d bytes", len(jerr.Problems), len(err.Error()))
			}
			t.Logf("%s: %d problems in %s", name, len(jerr.Problems), time.Since(start).Round(time.Millisecond))
		})
	}
}
