package workflow

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"tempest/wire"
)

// Thresholds are pass/fail criteria on a workflow's merged results, written
// in the job file as
//
//	thresholds:
//	  - "p(99) < 250ms"                                # all steps merged
//	  - "error_rate < 1%"
//	  - "rps > 1000"
//	  - {threshold: "p(95) < 100ms", step: login, abort_on_fail: true}
//	  - "checks > 99%"                                 # every check's passes
//	  - "check: has-token > 99.9%"                     # one check (of every step that has it)
//
// They live here rather than in a type because every type reports the same
// statistics (wire.StepStats), and next to the histograms because evaluating
// one is reading a merged histogram. Managers evaluate them; workers never
// see them.

// Limits on thresholds: they arrive over the network, and each costs a
// histogram merge per evaluation.
const (
	MaxThresholds       = 64
	maxThresholdExprLen = 256
)

// NoData is a ThresholdResult's Actual when nothing was measured: a
// percentile of no requests, or a rate over no time. Such a threshold fails
// at the end of a run (a CI gate must not pass a test that never ran) but is
// not acted on mid-run, where it only means "too early to tell".
const NoData = "no data"

// Metric is what a threshold measures.
type Metric uint8

// The metrics a threshold can name.
const (
	MetricPercentile Metric = iota + 1 // p(N): latency at percentile N
	MetricAvg                          // avg: mean latency
	MetricMin                          // min: smallest latency
	MetricMax                          // max: largest latency
	MetricErrorRate                    // error_rate: failed / (completed + failed), in percent
	MetricRPS                          // rps: (completed + failed) / elapsed
	MetricChecks                       // checks, or check: NAME: passed / judged, in percent
)

func (m Metric) latency() bool { return m >= MetricPercentile && m <= MetricMax }

// Op is a threshold's comparison.
type Op string

// The comparisons.
const (
	OpLess      Op = "<"
	OpLessEq    Op = "<="
	OpGreater   Op = ">"
	OpGreaterEq Op = ">="
)

func (o Op) holds(actual, limit float64) bool {
	switch o {
	case OpLess:
		return actual < limit
	case OpLessEq:
		return actual <= limit
	case OpGreater:
		return actual > limit
	case OpGreaterEq:
		return actual >= limit
	}
	return false
}

// Condition is a parsed threshold expression.
type Condition struct {
	Metric Metric
	// Percentile is p(N)'s N, in (0, 100].
	Percentile float64
	Op         Op
	// Limit is a latency metric's bound.
	Limit time.Duration
	// Value is error_rate's and checks' bound in percent (1 for "1%") or
	// rps's bound.
	Value float64
	// Check names the one check a "check: NAME" threshold reads; empty
	// for "checks", which reads them all.
	Check string
}

// ParseCondition parses a threshold expression: `p(N) OP DURATION`,
// `avg|min|max OP DURATION`, `error_rate OP PERCENT`, `rps OP NUMBER`,
// `checks OP PERCENT` or `check: NAME OP PERCENT` (the share of passes),
// where OP is <, <=, > or >=. Durations take a unit ("250ms", "1.5s"), as
// everywhere in a job file, and percentages a % sign: "error_rate < 1" could
// mean 1% or 100%.
func ParseCondition(expr string) (Condition, error) {
	if len(expr) > maxThresholdExprLen {
		return Condition{}, fmt.Errorf("expression is %d bytes, more than %d", len(expr), maxThresholdExprLen)
	}
	i := strings.IndexAny(expr, "<>")
	if i < 0 {
		return Condition{}, fmt.Errorf("%q has no comparison (<, <=, > or >=); write e.g. \"p(99) < 250ms\"", expr)
	}
	c := Condition{Op: Op(expr[i : i+1])}
	rest := expr[i+1:]
	if strings.HasPrefix(rest, "=") {
		c.Op += "="
		rest = rest[1:]
	}
	metric := strings.TrimSpace(expr[:i])
	bound := strings.TrimSpace(rest)
	if err := c.parseMetric(metric); err != nil {
		return Condition{}, err
	}
	if bound == "" {
		return Condition{}, fmt.Errorf("%q has nothing after %s", expr, c.Op)
	}
	if err := c.parseBound(bound); err != nil {
		return Condition{}, err
	}
	return c, nil
}

func (c *Condition) parseMetric(s string) error {
	switch s {
	case "avg":
		c.Metric = MetricAvg
	case "min":
		c.Metric = MetricMin
	case "max":
		c.Metric = MetricMax
	case "error_rate":
		c.Metric = MetricErrorRate
	case "rps":
		c.Metric = MetricRPS
	case "checks":
		c.Metric = MetricChecks
	default:
		if name, ok := strings.CutPrefix(s, "check:"); ok {
			name = strings.TrimSpace(name)
			if err := CheckName(name); err != nil {
				return fmt.Errorf("check name in %q %v", s, err)
			}
			c.Metric, c.Check = MetricChecks, name
			return nil
		}
		inner, ok := strings.CutPrefix(s, "p(")
		if inner, ok = strings.CutSuffix(inner, ")"); !ok {
			return fmt.Errorf("unknown metric %q (known: p(N), avg, min, max, error_rate, rps, checks, check: NAME)", s)
		}
		p, err := strconv.ParseFloat(strings.TrimSpace(inner), 64)
		if err != nil || !(p > 0 && p <= 100) {
			return fmt.Errorf("percentile in %q must be a number above 0 and at most 100", s)
		}
		c.Metric, c.Percentile = MetricPercentile, p
	}
	return nil
}

func (c *Condition) parseBound(s string) error {
	switch {
	case c.Metric.latency():
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return fmt.Errorf("bound of a latency must be a duration such as \"250ms\", got %q", s)
		}
		c.Limit = d
	case c.Metric == MetricErrorRate || c.Metric == MetricChecks:
		num, ok := strings.CutSuffix(s, "%")
		v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
		if !ok || err != nil || !(v >= 0 && v <= 100) {
			name := "error_rate"
			if c.Metric == MetricChecks {
				name = "checks"
			}
			return fmt.Errorf("bound of %s must be a percentage between 0%% and 100%% such as \"1%%\", got %q", name, s)
		}
		c.Value = v
	case c.Metric == MetricRPS:
		v, err := strconv.ParseFloat(strings.TrimSuffix(s, "/s"), 64)
		if err != nil || !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Errorf("bound of rps must be a number of requests per second such as \"1000\", got %q", s)
		}
		c.Value = v
	}
	return nil
}

// ValidateThresholds checks thresholds from the network (a spec may come
// from any API client) as the job-file parser does, with paths relative to
// the workflow ("thresholds[1]").
func ValidateThresholds(th []wire.Threshold) error {
	var errs FieldErrors
	if len(th) > MaxThresholds {
		errs.add("thresholds", "has %d thresholds, more than %d", len(th), MaxThresholds)
		return errs
	}
	for i, t := range th {
		path := IndexPath("thresholds", i)
		if _, err := ParseCondition(t.Expr); err != nil {
			errs.add(path, "%v", err)
		}
		if t.Step != "" {
			if err := CheckName(t.Step); err != nil {
				errs.add(JoinPath(path, "step"), "%v", err)
			}
		}
	}
	return errs.err()
}

// ParseThresholds reads a workflow's thresholds key: a list whose items are
// an expression, or a mapping {threshold, step, abort_on_fail}. Problems are
// recorded in f at their lines.
func ParseThresholds(f *Fields) []wire.Threshold {
	n, ok := f.Node("thresholds")
	if !ok {
		return nil
	}
	if n.Kind != ListNode {
		f.Errorf("thresholds", "must be a list of expressions such as \"p(99) < 250ms\", got %s", describe(n))
		return nil
	}
	if len(n.Items) > MaxThresholds {
		f.Errorf("thresholds", "has %d thresholds, more than %d", len(n.Items), MaxThresholds)
		return nil
	}
	base := JoinPath(f.Path(), "thresholds")
	var out []wire.Threshold
	for i, it := range n.Items {
		path := IndexPath(base, i)
		switch {
		case it != nil && it.Invalid:
			continue // already reported
		case it != nil && it.Kind == MapNode:
			item := newFields(path, it, it.Line, f.sink)
			item.Required("threshold")
			var t wire.Threshold
			if expr, ok := item.String("threshold"); ok {
				if _, err := ParseCondition(expr); err != nil {
					item.Errorf("threshold", "%v", err)
				}
				t.Expr = expr
			}
			if step, ok := item.String("step"); ok {
				if err := CheckName(step); err != nil {
					item.Errorf("step", "%v", err)
				}
				t.Step = step
			}
			t.AbortOnFail, _ = item.Bool("abort_on_fail")
			out = append(out, t)
		case it != nil && it.Kind == ScalarNode:
			expr, isStr := it.Value.(string)
			if !isStr {
				f.problemAt(it.Line, path, fmt.Sprintf("must be an expression such as \"p(99) < 250ms\", got %s", describe(it)))
				continue
			}
			if _, err := ParseCondition(expr); err != nil {
				f.problemAt(it.Line, path, err.Error())
			}
			out = append(out, wire.Threshold{Expr: expr})
		default:
			f.problemAt(lineOf(it, n.Line), path,
				fmt.Sprintf("must be an expression or a mapping with threshold, step and abort_on_fail, got %s", describe(it)))
		}
	}
	return out
}

// CheckThresholdSteps reports, at the line of each, a threshold of f's
// thresholds key that names a step the workflow does not have: judged only
// when the run ends, it would otherwise fail a whole test with "no data".
func CheckThresholdSteps(f *Fields, steps []string) {
	n, ok := f.Node("thresholds")
	if !ok || n.Kind != ListNode {
		return
	}
	base := JoinPath(f.Path(), "thresholds")
	for i, it := range n.Items {
		if it == nil || it.Invalid || it.Kind != MapNode {
			continue
		}
		for _, fl := range it.Fields {
			step, isStr := fl.Value.Value.(string)
			if fl.Key != "step" || fl.Value.Kind != ScalarNode || !isStr || step == "" || slices.Contains(steps, step) {
				continue
			}
			f.problemAt(fl.Line, JoinPath(IndexPath(base, i), "step"),
				fmt.Sprintf("no step is named %q (steps: %s)", step, strings.Join(steps, ", ")))
		}
	}
}

// CheckThresholdChecks reports, at the line of each, a threshold of f's
// thresholds key that reads a check ("check: NAME") no step of the
// workflow has, for the same reason as CheckThresholdSteps; checks, with
// no name, reads whatever checks there are.
func CheckThresholdChecks(f *Fields, checks []string) {
	n, ok := f.Node("thresholds")
	if !ok || n.Kind != ListNode {
		return
	}
	base := JoinPath(f.Path(), "thresholds")
	for i, it := range n.Items {
		if it == nil || it.Invalid {
			continue
		}
		expr, path, line := "", IndexPath(base, i), it.Line
		switch it.Kind {
		case ScalarNode:
			expr, _ = it.Value.(string)
		case MapNode:
			for _, fl := range it.Fields {
				if s, isStr := fl.Value.Value.(string); fl.Key == "threshold" && isStr {
					expr, path, line = s, JoinPath(path, "threshold"), fl.Line
				}
			}
		}
		c, err := ParseCondition(expr)
		if err != nil || c.Check == "" || slices.Contains(checks, c.Check) {
			continue
		}
		known := "none"
		if len(checks) > 0 {
			known = strings.Join(checks, ", ")
		}
		f.problemAt(line, path, fmt.Sprintf("no step has a check named %q (checks: %s)", c.Check, known))
	}
}

// Evaluate judges thresholds on a workflow's results: steps as reported
// (cumulative), the workflow's completed and failed counts and its elapsed
// time. A threshold without a step reads all steps merged; one with a step
// reads that step alone, and its error_rate and rps use that step's counts.
// Latency metrics read the uncorrected histogram, the one the summary table
// shows. An expression that does not parse (a spec that skipped
// validation) fails with the parse error as its Actual.
func Evaluate(th []wire.Threshold, steps []wire.StepStats, completed, failed int64, elapsed time.Duration) []wire.ThresholdResult {
	return CompileThresholds(th).Evaluate(steps, completed, failed, elapsed)
}

// CompiledThresholds are a workflow's thresholds with their expressions
// parsed once: the roles judge them on every status and, for abort_on_fail,
// every second of a run, and keep them with the job rather than parse the
// same text each time.
type CompiledThresholds struct {
	th    []wire.Threshold
	conds []Condition
	errs  []error // per threshold: its parse error, or nil
}

// CompileThresholds parses th. An expression that does not parse is kept
// with its error, which Evaluate reports as the threshold's Actual.
func CompileThresholds(th []wire.Threshold) *CompiledThresholds {
	c := &CompiledThresholds{th: th, conds: make([]Condition, len(th)), errs: make([]error, len(th))}
	for i, t := range th {
		c.conds[i], c.errs[i] = ParseCondition(t.Expr)
	}
	return c
}

// Len is how many thresholds c holds.
func (c *CompiledThresholds) Len() int { return len(c.th) }

// AbortOnFail is the thresholds of c that end a run when they fail.
func (c *CompiledThresholds) AbortOnFail() *CompiledThresholds {
	out := &CompiledThresholds{}
	for i, t := range c.th {
		if t.AbortOnFail {
			out.th, out.conds, out.errs = append(out.th, t), append(out.conds, c.conds[i]), append(out.errs, c.errs[i])
		}
	}
	return out
}

// Evaluate judges c on a workflow's results, as the package function
// Evaluate describes.
func (c *CompiledThresholds) Evaluate(steps []wire.StepStats, completed, failed int64, elapsed time.Duration) []wire.ThresholdResult {
	if len(c.th) == 0 {
		return nil
	}
	e := evaluator{steps: steps, completed: completed, failed: failed, elapsed: elapsed, merged: map[string]*selection{}}
	out := make([]wire.ThresholdResult, len(c.th))
	for i, t := range c.th {
		r := wire.ThresholdResult{Expr: t.Expr, Step: t.Step, AbortOnFail: t.AbortOnFail}
		if err := c.errs[i]; err != nil {
			r.Actual = "invalid: " + err.Error()
		} else {
			r.Passed, r.Actual = e.judge(c.conds[i], t.Step)
		}
		out[i] = r
	}
	return out
}

// Failed returns the results that did not pass.
func Failed(results []wire.ThresholdResult) []wire.ThresholdResult {
	var out []wire.ThresholdResult
	for _, r := range results {
		if !r.Passed {
			out = append(out, r)
		}
	}
	return out
}

// selection is the steps a threshold reads, merged.
type selection struct {
	hist              *Histogram // nil when no step had samples
	completed, failed int64
	err               error
	// checks sums the steps' checks by name.
	checks map[string]checkCount
}

type evaluator struct {
	steps             []wire.StepStats
	completed, failed int64
	elapsed           time.Duration
	merged            map[string]*selection // by step ("" = all); merging is the cost, so once each
}

func (e *evaluator) selection(step string) *selection {
	if s, ok := e.merged[step]; ok {
		return s
	}
	s := &selection{}
	if step == "" {
		s.completed, s.failed = e.completed, e.failed
	}
	for _, st := range e.steps {
		if step != "" && st.StepName != step {
			continue
		}
		if step != "" {
			s.completed += st.CompletedCount
			s.failed += st.FailedCount
		}
		for _, c := range st.Checks {
			if s.checks == nil {
				s.checks = map[string]checkCount{}
			}
			cc := s.checks[c.Name]
			cc.passed += c.Passed
			cc.failed += c.Failed
			s.checks[c.Name] = cc
		}
		if len(st.Histogram) == 0 || s.err != nil {
			continue
		}
		h, err := DecodeHistogram(st.Histogram)
		if err != nil {
			s.err = fmt.Errorf("step %q: %w", st.StepName, err)
			continue
		}
		if s.hist == nil {
			s.hist = h
		} else if err := s.hist.Merge(h); err != nil {
			s.err = fmt.Errorf("step %q: %w", st.StepName, err)
		}
	}
	e.merged[step] = s
	return s
}

func (e *evaluator) judge(c Condition, step string) (bool, string) {
	s := e.selection(step)
	switch {
	case c.Metric.latency():
		if s.err != nil {
			return false, "invalid histogram: " + s.err.Error()
		}
		if s.hist == nil || s.hist.Count() == 0 {
			return false, NoData
		}
		var d time.Duration
		switch c.Metric {
		case MetricPercentile:
			d = s.hist.Percentile(c.Percentile)
		case MetricAvg:
			d = s.hist.Mean()
		case MetricMin:
			d = s.hist.Min()
		case MetricMax:
			d = s.hist.Max()
		}
		return c.Op.holds(float64(d), float64(c.Limit)), formatLatency(d)
	case c.Metric == MetricErrorRate:
		total := s.completed + s.failed
		if total <= 0 {
			return false, NoData
		}
		pct := 100 * float64(s.failed) / float64(total)
		return c.Op.holds(pct, c.Value), strconv.FormatFloat(pct, 'g', 4, 64) + "%"
	case c.Metric == MetricChecks:
		var passed, judged int64
		for name, cc := range s.checks {
			if c.Check == "" || name == c.Check {
				passed += cc.passed
				judged += cc.passed + cc.failed
			}
		}
		if judged == 0 {
			return false, NoData
		}
		pct := 100 * float64(passed) / float64(judged)
		return c.Op.holds(pct, c.Value), strconv.FormatFloat(pct, 'g', 6, 64) + "%"
	case c.Metric == MetricRPS:
		if e.elapsed <= 0 {
			return false, NoData
		}
		rps := float64(s.completed+s.failed) / e.elapsed.Seconds()
		return c.Op.holds(rps, c.Value), strconv.FormatFloat(rps, 'f', 1, 64) + "/s"
	}
	return false, NoData
}

// formatLatency prints a latency exactly (histograms hold microseconds), so
// the Actual of a failed boundary case shows why it failed.
func formatLatency(d time.Duration) string {
	return d.Round(time.Microsecond).String()
}
