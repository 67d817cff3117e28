package jobfile

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"tempest/wire"
)

const withThresholds = `name: api
workflows:
  - name: api
    type: http
    vus: 2
    iterations: 10
    steps:
      - {name: login, url: "http://127.0.0.1:8080/login"}
      - {name: home, url: "http://127.0.0.1:8080/"}
    thresholds:
      - "p(99) < 250ms"
      - "error_rate < 1%"
      - "rps > 1000"
      - {threshold: "p(95) < 100ms", step: login, abort_on_fail: true}
  - name: nap
    type: sleep
    duration: 1s
    thresholds: ["max <= 2s"]
`

func TestParseThresholds(t *testing.T) {
	sub := mustParse(t, withThresholds)
	want := [][]wire.Threshold{
		{
			{Expr: "p(99) < 250ms"},
			{Expr: "error_rate < 1%"},
			{Expr: "rps > 1000"},
			{Expr: "p(95) < 100ms", Step: "login", AbortOnFail: true},
		},
		{{Expr: "max <= 2s"}},
	}
	for i, w := range want {
		if got := sub.Workflows[i].Thresholds; !reflect.DeepEqual(got, w) {
			t.Errorf("workflows[%d].Thresholds = %+v, want %+v", i, got, w)
		}
	}
	// Through the wire and back, as the manager receives them.
	b, err := wire.Marshal(sub)
	if err != nil {
		t.Fatal(err)
	}
	var back wire.JobSubmission
	if err := wire.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Workflows[0].Thresholds, want[0]) {
		t.Errorf("after CBOR round trip: %+v", back.Workflows[0].Thresholds)
	}
}

func TestParseThresholdErrors(t *testing.T) {
	cases := []struct {
		name     string
		old, new string
		want     []string // every line of Error(), in order
	}{
		{
			name: "unknown metric",
			old:  `"rps > 1000"`, new: `"p99 > 1000"`,
			want: []string{`smoke.yaml:13: workflows[0].thresholds[2]: unknown metric "p99" (known: p(N), avg, min, max, error_rate, rps, checks, check: NAME)`},
		},
		{
			name: "duration without unit",
			old:  `"p(99) < 250ms"`, new: `"p(99) < 250"`,
			want: []string{`smoke.yaml:11: workflows[0].thresholds[0]: bound of a latency must be a duration such as "250ms", got "250"`},
		},
		{
			name: "percent without sign",
			old:  `"error_rate < 1%"`, new: `"error_rate < 1"`,
			want: []string{`smoke.yaml:12: workflows[0].thresholds[1]: bound of error_rate must be a percentage between 0% and 100% such as "1%", got "1"`},
		},
		{
			name: "no comparison",
			old:  `"rps > 1000"`, new: `"rps = 1000"`,
			want: []string{`smoke.yaml:13: workflows[0].thresholds[2]: "rps = 1000" has no comparison (<, <=, > or >=); write e.g. "p(99) < 250ms"`},
		},
		{
			name: "percentile out of range",
			old:  `"p(99) < 250ms"`, new: `"p(101) < 250ms"`,
			want: []string{`smoke.yaml:11: workflows[0].thresholds[0]: percentile in "p(101)" must be a number above 0 and at most 100`},
		},
		{
			name: "bad expression in a mapping",
			old:  `threshold: "p(95) < 100ms"`, new: `threshold: "p(95) <"`,
			want: []string{`smoke.yaml:14: workflows[0].thresholds[3].threshold: "p(95) <" has nothing after <`},
		},
		{
			name: "mapping without threshold, misspelt key",
			old:  `threshold: "p(95) < 100ms"`, new: `treshold: "p(95) < 100ms"`,
			want: []string{
				`smoke.yaml:14: workflows[0].thresholds[3].threshold: is required`,
				`smoke.yaml:14: workflows[0].thresholds[3]: unknown key "treshold" (did you mean "threshold"?)`,
			},
		},
		{
			name: "abort_on_fail not a boolean",
			old:  `abort_on_fail: true`, new: `abort_on_fail: "yes"`,
			want: []string{`smoke.yaml:14: workflows[0].thresholds[3].abort_on_fail: must be true or false, got "yes"`},
		},
		{
			name: "not a list",
			old:  `thresholds: ["max <= 2s"]`, new: `thresholds: "max <= 2s"`,
			want: []string{`smoke.yaml:18: workflows[1].thresholds: must be a list of expressions such as "p(99) < 250ms", got "max <= 2s"`},
		},
		{
			name: "a number is not an expression",
			old:  `thresholds: ["max <= 2s"]`, new: `thresholds: [250]`,
			want: []string{`smoke.yaml:18: workflows[1].thresholds[0]: must be an expression such as "p(99) < 250ms", got 250`},
		},
		{
			name: "a step the workflow does not have",
			old:  `step: login,`, new: `step: logn,`,
			want: []string{`smoke.yaml:14: workflows[0].thresholds[3].step: no step is named "logn" (steps: login, home)`},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.Replace(withThresholds, tc.old, tc.new, 1)
			if src == withThresholds {
				t.Fatalf("%q not found in the job file", tc.old)
			}
			_, err := parse(t, src)
			var perr *Error
			if !errors.As(err, &perr) {
				t.Fatalf("err = %v, want *Error", err)
			}
			if got := strings.Split(perr.Error(), "\n"); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}
