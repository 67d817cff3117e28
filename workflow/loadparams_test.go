package workflow

import (
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestHTTPLoadModelParamsValidate(t *testing.T) {
	stages := func(targets ...float64) []Stage {
		var out []Stage
		for _, v := range targets {
			out = append(out, Stage{Duration: time.Second, Target: v})
		}
		return out
	}
	open := func(p *HTTPParams) { p.Model, p.Iterations, p.Rate, p.Duration = OpenModel, 0, 100, 5*time.Second }
	ramping := func(p *HTTPParams) { p.Iterations, p.VUs, p.Stages = 0, 0, stages(10, 0) }
	cases := []struct {
		name   string
		mutate func(*HTTPParams)
		want   string // empty means valid
	}{
		{"open", open, ""},
		{"open with stages only", func(p *HTTPParams) { open(p); p.Rate, p.Duration, p.Stages = 0, 0, stages(50, 0) }, ""},
		{"open stages held by duration", func(p *HTTPParams) { open(p); p.Stages = stages(50) }, ""},
		{"open fractional rate", func(p *HTTPParams) { open(p); p.Rate = 0.25 }, ""},
		{"open max_vus", func(p *HTTPParams) { open(p); p.MaxVUs, p.VUs = 10, 10 }, ""},
		{"open without rate", func(p *HTTPParams) { open(p); p.Rate = 0 }, "rate: is required for the open model"},
		{"open without duration", func(p *HTTPParams) { open(p); p.Duration = 0 }, "duration: is required for the open model"},
		{"open NaN rate", func(p *HTTPParams) { open(p); p.Rate = math.NaN() }, "rate: must be between 0 and 1000000"},
		{"open huge rate", func(p *HTTPParams) { open(p); p.Rate = 2e6 }, "rate: must be between 0 and 1000000"},
		{"open iterations", func(p *HTTPParams) { open(p); p.Iterations = 5 }, "iterations: does not apply to the open model"},
		{"open vus above max", func(p *HTTPParams) { open(p); p.MaxVUs, p.VUs = 4, 8 }, "vus: allocates 8 VUs up front, more than max_vus (4)"},
		{"open zero stages", func(p *HTTPParams) { open(p); p.Rate, p.Duration, p.Stages = 0, 0, stages(0, 0) }, "stages: the rate never rises above 0"},
		{"open negative stage", func(p *HTTPParams) { open(p); p.Stages = stages(5, -1) }, "stages[1].target: must be a rate"},
		{"stages longer than duration", func(p *HTTPParams) { open(p); p.Duration, p.Stages = time.Second, stages(5, 5) }, "duration: is 1s, shorter than the stages, which last 2s"},
		{"unknown model", func(p *HTTPParams) { p.Model = 7 }, "model: must be closed or open, got LoadModel(7)"},
		{"ramping", ramping, ""},
		{"ramping from vus", func(p *HTTPParams) { ramping(p); p.VUs = 3 }, ""},
		{"ramping fractional VUs", func(p *HTTPParams) { ramping(p); p.Stages[0].Target = 2.5 }, "stages[0].target: must be a whole number of VUs"},
		{"ramping to nothing", func(p *HTTPParams) { ramping(p); p.Stages = stages(0) }, "stages: no stage has a VU target above 0"},
		{"ramping with iterations", func(p *HTTPParams) { ramping(p); p.Iterations = 3 }, "iterations: cannot be combined with stages"},
		{"ramping negative stage duration", func(p *HTTPParams) { ramping(p); p.Stages[1].Duration = -time.Second }, "stages[1].duration: must be between 0 and 24h"},
		{"too many stages", func(p *HTTPParams) {
			ramping(p)
			p.Stages = stages(make([]float64, MaxStages+1)...)
			p.Stages[0].Target = 1
		}, "stages: must have at most 64 stages"},
		{"closed with rate", func(p *HTTPParams) { p.Rate = 5 }, "rate: only applies to the open model"},
		{"closed with max_vus", func(p *HTTPParams) { p.MaxVUs = 5 }, "max_vus: only applies to the open model"},
		{"think time", func(p *HTTPParams) { p.Steps[0].ThinkTime = time.Second }, ""},
		{"negative think time", func(p *HTTPParams) { p.Steps[0].ThinkTime = -1 }, "steps[0].think_time: must be between 0 and 1h"},
		{"huge expect_body", func(p *HTTPParams) { p.Steps[0].ExpectBody = strings.Repeat("x", maxExpectBody+1) }, "steps[0].expect_body: must be at most"},
		{"templated url", func(p *HTTPParams) { p.Steps[0].URL = "http://127.0.0.1/{{vu}}?r={{random_int 1 9}}" }, ""},
		{"unknown template function in url", func(p *HTTPParams) { p.Steps[0].URL = "http://x/{{user}}" }, `steps[0].url: {{user}} is not a template function (vu, iteration, random_int, data.<column>) and no earlier step captures it`},
		{"templated url that is no url", func(p *HTTPParams) { p.Steps[0].URL = "{{vu}}/x" }, "steps[0].url: must be an http:// or https:// URL"},
		{"bad template in header", func(p *HTTPParams) { p.Steps[1].Headers["X-Id"] = "{{vu" }, "steps[1].headers.X-Id: template at byte 0: unclosed {{"},
		{"bad template in body", func(p *HTTPParams) { p.Steps[1].Body = "{{random_int 3 1}}" }, "steps[1].body: template at byte 0: {{random_int 3 1}}: the lower bound"},
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
				if _, err := newHTTPRunner("wf", &p); err != nil {
					t.Fatalf("valid params do not build a runner: %v", err)
				}
				return
			}
			var fes FieldErrors
			if !errors.As(err, &fes) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want FieldErrors containing %q", err, tc.want)
			}
		})
	}
}

// A job file's new keys, read through Fields, and their problems placed at
// their lines with their paths.
func TestHTTPParseLoadModelKeys(t *testing.T) {
	str := func(line int, v string) *Node { return &Node{Kind: ScalarNode, Line: line, Value: v, Text: v} }
	num := func(line int, v any) *Node { return &Node{Kind: ScalarNode, Line: line, Value: v, Text: fmtAny(v)} }
	stage := func(line int, d string, target any) *Node {
		return &Node{Kind: MapNode, Line: line, Fields: []Field{{Key: "duration", Line: line, Value: str(line, d)}, {Key: "target", Line: line, Value: num(line, target)}}}
	}
	parse := func(fields ...Field) (*HTTPParams, []string) {
		f := NewFields("workflows[0]", &Node{Kind: MapNode, Line: 1, Fields: fields})
		b := HTTPType{}.ParseParams(f)
		var problems []string
		for _, p := range f.Finish() {
			problems = append(problems, strconv.Itoa(p.Line)+" | "+p.Path+" | "+p.Message)
		}
		if len(problems) > 0 {
			return nil, problems
		}
		p, err := HTTPType{}.DecodeParams(b)
		if err != nil {
			t.Fatal(err)
		}
		return p.(*HTTPParams), nil
	}
	steps := func(line int, extra ...Field) Field {
		st := &Node{Kind: MapNode, Line: line, Fields: append([]Field{
			{Key: "name", Line: line, Value: str(line, "s")},
			{Key: "url", Line: line, Value: str(line, "http://x/{{vu}}")},
		}, extra...)}
		return Field{Key: "steps", Line: line, Value: &Node{Kind: ListNode, Line: line, Items: []*Node{st}}}
	}

	p, problems := parse(
		Field{Key: "rate", Line: 2, Value: num(2, int64(200))},
		Field{Key: "duration", Line: 3, Value: str(3, "30s")},
		Field{Key: "max_vus", Line: 4, Value: num(4, int64(50))},
		Field{Key: "stages", Line: 5, Value: &Node{Kind: ListNode, Line: 6, Items: []*Node{stage(6, "10s", 2.5), stage(7, "5s", int64(400))}}},
		Field{Key: "connection_reuse", Line: 8, Value: &Node{Kind: ScalarNode, Line: 8, Value: false, Text: "false"}},
		steps(9,
			Field{Key: "think_time", Line: 10, Value: str(10, "1s")},
			Field{Key: "expect_body", Line: 11, Value: str(11, "ok")}),
	)
	if problems != nil {
		t.Fatalf("problems: %v", problems)
	}
	want := &HTTPParams{Model: OpenModel, VUs: 0, Rate: 200, Duration: 30 * time.Second, MaxVUs: 50,
		Stages:            []Stage{{Duration: 10 * time.Second, Target: 2.5}, {Duration: 5 * time.Second, Target: 400}},
		NoConnectionReuse: true,
		Steps:             []HTTPStep{{Name: "s", Method: "GET", URL: "http://x/{{vu}}", ThinkTime: time.Second, ExpectBody: "ok"}}}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("params %+v\nwant %+v", p, want)
	}

	// Closed with stages: the ramp starts from 0 VUs unless vus is given.
	p, problems = parse(
		Field{Key: "stages", Line: 2, Value: &Node{Kind: ListNode, Line: 3, Items: []*Node{stage(3, "10s", int64(20))}}},
		steps(4),
	)
	if problems != nil || p.Model != ClosedModel || p.VUs != 0 || len(p.Stages) != 1 {
		t.Fatalf("closed stages: %+v, %v", p, problems)
	}

	_, problems = parse(
		Field{Key: "model", Line: 2, Value: str(2, "poisson")},
		Field{Key: "iterations", Line: 3, Value: num(3, int64(5))},
		Field{Key: "connection_reuse", Line: 4, Value: str(4, "yes")},
		steps(5, Field{Key: "body", Line: 6, Value: str(6, "{{uuid}}")}),
	)
	want2 := []string{
		`2 | workflows[0].model | must be closed or open, got "poisson"`,
		`4 | workflows[0].connection_reuse | must be true or false, got "yes"`,
		`6 | workflows[0].steps[0].body | {{uuid}} is not a template function (vu, iteration, random_int, data.<column>) and no earlier step captures it (captured before this step: [])`,
	}
	if strings.Join(problems, "\n") != strings.Join(want2, "\n") {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(problems, "\n"), strings.Join(want2, "\n"))
	}
}

func fmtAny(v any) string {
	switch x := v.(type) {
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return ""
}
