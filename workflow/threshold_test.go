package workflow

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"tempest/wire"
)

func TestParseCondition(t *testing.T) {
	good := []struct {
		expr string
		want Condition
	}{
		{"p(99) < 250ms", Condition{Metric: MetricPercentile, Percentile: 99, Op: OpLess, Limit: 250 * time.Millisecond}},
		{"p(99.9)<=1.5s", Condition{Metric: MetricPercentile, Percentile: 99.9, Op: OpLessEq, Limit: 1500 * time.Millisecond}},
		{" p( 50 ) >  10us ", Condition{Metric: MetricPercentile, Percentile: 50, Op: OpGreater, Limit: 10 * time.Microsecond}},
		{"p(100) >= 0s", Condition{Metric: MetricPercentile, Percentile: 100, Op: OpGreaterEq}},
		{"avg < 20ms", Condition{Metric: MetricAvg, Op: OpLess, Limit: 20 * time.Millisecond}},
		{"min >= 1ms", Condition{Metric: MetricMin, Op: OpGreaterEq, Limit: time.Millisecond}},
		{"max <= 2s", Condition{Metric: MetricMax, Op: OpLessEq, Limit: 2 * time.Second}},
		{"error_rate < 1%", Condition{Metric: MetricErrorRate, Op: OpLess, Value: 1}},
		{"error_rate <= 0.5 %", Condition{Metric: MetricErrorRate, Op: OpLessEq, Value: 0.5}},
		{"rps > 1000", Condition{Metric: MetricRPS, Op: OpGreater, Value: 1000}},
		{"rps >= 1e3/s", Condition{Metric: MetricRPS, Op: OpGreaterEq, Value: 1000}},
		{"checks > 99%", Condition{Metric: MetricChecks, Op: OpGreater, Value: 99}},
		{"check: has-token > 99.9%", Condition{Metric: MetricChecks, Op: OpGreater, Value: 99.9, Check: "has-token"}},
		{"check:ok>=100%", Condition{Metric: MetricChecks, Op: OpGreaterEq, Value: 100, Check: "ok"}},
	}
	for _, tc := range good {
		got, err := ParseCondition(tc.expr)
		if err != nil {
			t.Errorf("ParseCondition(%q): %v", tc.expr, err)
			continue
		}
		if got != tc.want {
			t.Errorf("ParseCondition(%q) = %+v, want %+v", tc.expr, got, tc.want)
		}
	}
	bad := []struct{ expr, wantErr string }{
		{"", "has no comparison"},
		{"p(99) 250ms", "has no comparison"},
		{"p(99) =< 250ms", "unknown metric \"p(99) =\""},
		{"p(99) <", "has nothing after <"},
		{"p(0) < 1s", "percentile in \"p(0)\""},
		{"p(100.1) < 1s", "percentile in"},
		{"p(NaN) < 1s", "percentile in"},
		{"p99 < 1s", "unknown metric \"p99\""},
		{"latency < 1s", "unknown metric"},
		{"p(99) < 250", "must be a duration"},
		{"p(99) < -1s", "must be a duration"},
		{"avg < 1%", "must be a duration"},
		{"error_rate < 1", "must be a percentage"},
		{"error_rate < 101%", "must be a percentage"},
		{"error_rate < -1%", "must be a percentage"},
		{"rps > fast", "must be a number of requests per second"},
		{"rps > -5", "must be a number of requests per second"},
		{"rps > +Inf", "must be a number of requests per second"},
		{"rps > NaN", "must be a number of requests per second"},
		{"rps > 10 < 20", "must be a number of requests per second"},
		{"checks > 99", "bound of checks must be a percentage"},
		{"check: > 99%", "check name in \"check:\" must not be empty"},
		{strings.Repeat("p", 300) + " < 1s", "more than 256"},
	}
	for _, tc := range bad {
		_, err := ParseCondition(tc.expr)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("ParseCondition(%q) = %v, want an error containing %q", tc.expr, err, tc.wantErr)
		}
	}
}

func TestValidateThresholds(t *testing.T) {
	err := ValidateThresholds([]wire.Threshold{
		{Expr: "p(99) < 1s"},
		{Expr: "p(99) < 1"},
		{Expr: "rps > 1", Step: "bad\nname"},
	})
	want := `thresholds[1]: bound of a latency must be a duration such as "250ms", got "1"; ` +
		`thresholds[2].step: must be printable, has U+000A`
	if err == nil || err.Error() != want {
		t.Errorf("ValidateThresholds = %v\nwant %s", err, want)
	}
	if err := ValidateThresholds([]wire.Threshold{{Expr: "max < 1s", Step: "login"}}); err != nil {
		t.Errorf("valid thresholds: %v", err)
	}
	if err := ValidateThresholds(make([]wire.Threshold, MaxThresholds+1)); err == nil {
		t.Error("too many thresholds accepted")
	}
}

// stepStats builds a step whose latencies are given in microseconds. Below
// 2048µs every microsecond has its own bucket, so percentiles are exact and
// the boundary cases below test the comparison, not the histogram.
func stepStats(t *testing.T, name string, completed, failed int64, micros []int) wire.StepStats {
	t.Helper()
	h := NewHistogram()
	for _, us := range micros {
		h.Record(time.Duration(us) * time.Microsecond)
	}
	b, err := h.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return wire.StepStats{StepName: name, CompletedCount: completed, FailedCount: failed,
		TotalCount: completed + failed, Histogram: b}
}

func spread(from, step, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i*step
	}
	return out
}

func TestEvaluate(t *testing.T) {
	// login: 10, 20, ..., 1000µs (98 completed, 2 failed); home: 1010, ...,
	// 2000µs. Merged: 200 samples from 10µs to 2000µs; the workflow did 198
	// completed and 2 failed (1%) in 2s (100/s).
	steps := []wire.StepStats{
		stepStats(t, "login", 98, 2, spread(10, 10, 100)),
		stepStats(t, "home", 100, 0, spread(1010, 10, 100)),
	}
	const completed, failed, elapsed = 198, 2, 2 * time.Second

	cases := []struct {
		expr, step string
		passed     bool
		actual     string
	}{
		// Percentile boundaries: the 99th of 100 samples is 990µs; of the
		// merged 200, the 198th is 1980µs.
		{"p(99) < 990us", "login", false, "990µs"},
		{"p(99) <= 990us", "login", true, "990µs"},
		{"p(99) > 990us", "login", false, "990µs"},
		{"p(99) >= 990us", "login", true, "990µs"},
		{"p(99) < 1980us", "", false, "1.98ms"},
		{"p(99) <= 1980us", "", true, "1.98ms"},
		{"p(50) <= 1ms", "", true, "1ms"},
		{"p(50) < 1ms", "", false, "1ms"},
		{"p(100) <= 2ms", "", true, "2ms"},
		{"p(99) <= 1990us", "home", true, "1.99ms"},
		{"avg <= 505us", "login", true, "505µs"},
		{"avg > 505us", "login", false, "505µs"},
		{"avg < 1.006ms", "", true, "1.005ms"},
		{"min >= 10us", "", true, "10µs"},
		{"min > 10us", "", false, "10µs"},
		{"max < 2ms", "", false, "2ms"},
		{"max <= 2ms", "", true, "2ms"},
		// Error rate: 2 of 200 is exactly 1%; login alone 2 of 100.
		{"error_rate < 1%", "", false, "1%"},
		{"error_rate <= 1%", "", true, "1%"},
		{"error_rate < 2%", "login", false, "2%"},
		{"error_rate <= 0%", "home", true, "0%"},
		// Rate: 200 requests in 2s; login alone 100.
		{"rps > 100", "", false, "100.0/s"},
		{"rps >= 100", "", true, "100.0/s"},
		{"rps >= 50", "login", true, "50.0/s"},
		{"rps > 50", "login", false, "50.0/s"},
		// A step that did not run has nothing to judge: that fails.
		{"p(99) < 1s", "nosuch", false, NoData},
		{"error_rate < 1%", "nosuch", false, NoData},
		{"rps >= 0", "nosuch", true, "0.0/s"},
	}
	th := make([]wire.Threshold, len(cases))
	for i, tc := range cases {
		th[i] = wire.Threshold{Expr: tc.expr, Step: tc.step, AbortOnFail: i%2 == 0}
	}
	got := Evaluate(th, steps, completed, failed, elapsed)
	if len(got) != len(cases) {
		t.Fatalf("%d results for %d thresholds", len(got), len(cases))
	}
	for i, tc := range cases {
		want := wire.ThresholdResult{Expr: tc.expr, Step: tc.step, Passed: tc.passed, Actual: tc.actual, AbortOnFail: i%2 == 0}
		if got[i] != want {
			t.Errorf("%q (step %q) = %+v, want %+v", tc.expr, tc.step, got[i], want)
		}
	}
}

func TestEvaluateWithoutData(t *testing.T) {
	th := []wire.Threshold{{Expr: "p(99) < 1s"}, {Expr: "error_rate < 1%"}, {Expr: "rps > 0"}, {Expr: "avg < 1s"}}
	got := Evaluate(th, nil, 0, 0, 0)
	for _, r := range got {
		if r.Passed || r.Actual != NoData {
			t.Errorf("%s with no data = %+v, want failed with %q", r.Expr, r, NoData)
		}
	}
	if len(Failed(got)) != len(th) {
		t.Errorf("Failed = %v", Failed(got))
	}
	if Evaluate(nil, nil, 0, 0, 0) != nil {
		t.Error("no thresholds should give no results")
	}
}

func TestEvaluateBadInput(t *testing.T) {
	steps := []wire.StepStats{{StepName: "a", CompletedCount: 1, Histogram: []byte{0xff, 0x00}}}
	got := Evaluate([]wire.Threshold{{Expr: "p(99) < 1s"}, {Expr: "rps < 1 <"}, {Expr: "error_rate < 50%"}}, steps, 1, 0, time.Second)
	if got[0].Passed || !strings.HasPrefix(got[0].Actual, "invalid histogram") {
		t.Errorf("undecodable histogram: %+v", got[0])
	}
	if got[1].Passed || !strings.HasPrefix(got[1].Actual, "invalid: ") {
		t.Errorf("unparsable expression: %+v", got[1])
	}
	// Counts need no histogram, so a bad one does not spoil them.
	if !got[2].Passed || got[2].Actual != "0%" {
		t.Errorf("error rate beside a bad histogram: %+v", got[2])
	}
}

// TestEvaluateMatchesOneHistogram: the merged view is that of one recorder
// of every sample, whichever way the samples were split into steps.
func TestEvaluateMatchesOneHistogram(t *testing.T) {
	a := spread(100, 37, 500)
	b := spread(90000, 1234, 300) // beyond 2048µs: buckets wider than 1µs
	split := []wire.StepStats{stepStats(t, "a", 500, 0, a), stepStats(t, "b", 300, 0, b)}
	one := []wire.StepStats{stepStats(t, "all", 800, 0, append(append([]int{}, a...), b...))}
	th := []wire.Threshold{{Expr: "p(99.9) < 1ms"}, {Expr: "p(50) < 1ms"}, {Expr: "avg < 1ms"}, {Expr: "max < 1ms"}}
	got := Evaluate(th, split, 800, 0, time.Second)
	want := Evaluate(th, one, 800, 0, time.Second)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("merged steps %+v\none histogram %+v", got, want)
	}
}

// Thresholds parsed once judge as Evaluate does, and keep an expression that
// does not parse with its error.
func TestCompiledThresholds(t *testing.T) {
	th := []wire.Threshold{{Expr: "p(99) < 10ms"}, {Expr: "error_rate < 1%", AbortOnFail: true}, {Expr: "rps < 1 <", AbortOnFail: true}}
	c := CompileThresholds(th)
	steps := []wire.StepStats{stepStats(t, "a", 90, 10, spread(1000, 100, 100))}
	want := Evaluate(th, steps, 90, 10, time.Second)
	for range 2 {
		got := c.Evaluate(steps, 90, 10, time.Second)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("compiled %+v, Evaluate %+v", got, want)
		}
	}
	abort := c.AbortOnFail()
	got := abort.Evaluate(steps, 90, 10, time.Second)
	if abort.Len() != 2 || len(got) != 2 || got[0].Expr != "error_rate < 1%" || got[0].Passed ||
		!strings.HasPrefix(got[1].Actual, "invalid: ") {
		t.Fatalf("abort_on_fail ones: %+v", got)
	}
	if CompileThresholds(nil).Evaluate(steps, 1, 0, time.Second) != nil {
		t.Fatal("no thresholds judged something")
	}
}

// Check thresholds read the steps' check counts: all checks, one check
// across the steps that have it, or one step's.
func TestEvaluateChecks(t *testing.T) {
	steps := []wire.StepStats{
		{StepName: "login", CompletedCount: 10, Checks: []wire.CheckStats{{Name: "ok", Passed: 10}, {Name: "has-token", Passed: 9, Failed: 1}}},
		{StepName: "api", CompletedCount: 10, Checks: []wire.CheckStats{{Name: "ok", Passed: 8, Failed: 2}}},
		{StepName: "none", CompletedCount: 10},
	}
	cases := []struct {
		th     wire.Threshold
		passed bool
		actual string
	}{
		{wire.Threshold{Expr: "checks > 89%"}, true, "90%"},  // 27 of 30
		{wire.Threshold{Expr: "checks > 90%"}, false, "90%"}, // not above
		{wire.Threshold{Expr: "check: ok >= 90%"}, true, "90%"},
		{wire.Threshold{Expr: "check: has-token > 99.9%"}, false, "90%"},
		{wire.Threshold{Expr: "checks >= 100%", Step: "login"}, false, "95%"},
		{wire.Threshold{Expr: "check: ok >= 100%", Step: "login"}, true, "100%"},
		{wire.Threshold{Expr: "checks > 1%", Step: "none"}, false, NoData},
		{wire.Threshold{Expr: "check: nope > 1%"}, false, NoData},
	}
	for _, tc := range cases {
		r := Evaluate([]wire.Threshold{tc.th}, steps, 30, 0, time.Second)[0]
		if r.Passed != tc.passed || r.Actual != tc.actual {
			t.Errorf("%q (step %q): passed %v actual %q, want %v %q", tc.th.Expr, tc.th.Step, r.Passed, r.Actual, tc.passed, tc.actual)
		}
	}
}
