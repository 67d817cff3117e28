package workflow

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// defaultUserAgent names the load so a target's operator can tell it apart
// from real users; a step's own User-Agent header wins.
const defaultUserAgent = "tempest-loadgen/1"

type httpRunner struct {
	name    string
	params  *HTTPParams
	steps   []preparedStep
	timeout time.Duration
	exec    executor
	// sender speaks the protocol: the lean HTTP/1.1 client for http1,
	// net/http for h2, h2c and h3 (see newSender).
	sender sender
	data   *dataRows // nil without a data file
	// slotOf numbers the captured variables; slotVU says which of them
	// last the VU's life (capture_scope: vu) rather than an iteration.
	slotOf map[string]int
	slotVU []bool
	// flows is each VU's flow state (captured values, cookie jar, what it
	// keeps of a response), indexed like bodies.
	flows []vuFlow
	// nSetup is how many of steps, at the front, are setup steps
	// (http_setup.go); seed holds what they captured.
	nSetup    int
	seed      *vuVars
	redirects int  // how many redirects a step follows
	cookies   bool // a cookie jar per VU
	// bodies count each VU's response bodies; a VU's requests run one at a
	// time on its goroutine, so it reuses its own and a request allocates
	// none.
	bodies []countingWriter
}

// preparedStep is an HTTPStep turned into what each request needs, once:
// templates parsed, headers split into the shared static set and the
// templated ones.
type preparedStep struct {
	name   string
	method string
	url    *template
	// header is shared, read-only, by every request of the step: net/http
	// does not modify a request's headers (RoundTripper's contract, and
	// Client copies the request before adding any), which saves a map clone
	// per request. Only a step with templated header values clones it.
	header     http.Header
	dynHeaders []dynHeader
	host       *template // a Host header, which net/http takes from Request.Host
	body       *template
	expect     []int  // nil: any 2xx or 3xx
	expectBody []byte // nil: any body
	thinkTime  time.Duration
	// parsed is the static URL, parsed once for the cookie jar and for
	// resolving redirects (nil when the URL is templated).
	parsed *url.URL
	// needs lists the slots of the captured values the step renders.
	needs    []int
	captures []preparedCapture
	checks   []preparedCheck
	// wantHead: a capture or check reads a header, so every field of the
	// response is kept; wantBody: one reads the body, so it is kept (up to
	// maxFlowBody); wantCookies: a capture reads Set-Cookie.
	wantHead, wantBody, wantCookies bool
	// ownCookie: the step sends a Cookie header of its own, and the jar's
	// cookies are not added to it.
	ownCookie bool
}

type dynHeader struct {
	key   string
	value *template
}

func (st *preparedStep) expects(code int) bool {
	if st.expect == nil {
		return code >= 200 && code < 400
	}
	return slices.Contains(st.expect, code)
}

// header returns the request's headers: the shared set, or a copy with the
// templated values rendered.
func (st *preparedStep) headerFor(v tmplVars) http.Header {
	if len(st.dynHeaders) == 0 {
		return st.header
	}
	h := st.header.Clone()
	for _, d := range st.dynHeaders {
		h.Add(d.key, d.value.render(v))
	}
	return h
}

// newHTTPRunner prepares a run from validated params. Templates are parsed
// again here rather than kept from Validate: params stay plain data (what
// crosses the wire, comparable in tests), and parsing costs microseconds
// per dispatch, never anything per request.
func newHTTPRunner(name string, p *HTTPParams) (*httpRunner, error) {
	r := &httpRunner{name: name, params: p, timeout: p.Timeout, exec: newExecutor(p),
		redirects: p.redirectLimit(), cookies: !p.NoCookies, slotOf: map[string]int{}}
	all := append(slices.Clip(p.Setup), p.Steps...)
	r.nSetup = len(p.Setup)
	for i, s := range all {
		for _, c := range s.Captures {
			if _, ok := r.slotOf[c.Name]; !ok {
				r.slotOf[c.Name] = len(r.slotVU)
				r.slotVU = append(r.slotVU, i < r.nSetup || s.CaptureScope == ScopeVU)
			}
		}
	}
	if r.timeout == 0 {
		r.timeout = DefaultRequestTimeout
	}
	var table *dataTable
	if p.Data != nil {
		if p.Data.CSV == "" && p.Data.Blob != "" {
			return nil, fmt.Errorf("data file %q: blob %s was not attached before the run", p.Data.File, p.Data.Blob)
		}
		t, err := parseDataCSV(p.Data.File, p.Data.CSV)
		if err != nil {
			return nil, fmt.Errorf("data file %q: %w", p.Data.File, err)
		}
		table = t
		r.data = &dataRows{table: t, mode: p.Data.Mode}
	}
	for _, s := range all {
		st, err := prepareStep(s, table, r.slotOf, p.Secrets)
		if err != nil {
			return nil, fmt.Errorf("step %q: %w", s.Name, err)
		}
		switch {
		case st.expect != nil:
		case p.Protocol == ProtocolGRPC:
			st.expect = []int{0} // gRPC's OK
		case p.Protocol == ProtocolWebSocket:
			st.expect = []int{wsStatus}
		}
		r.steps = append(r.steps, st)
	}
	sender, err := newSender(r.steps, r.exec.maxVUs(), p)
	if err != nil {
		return nil, fmt.Errorf("workflow %s: %w", name, err)
	}
	r.sender = sender
	r.bodies = make([]countingWriter, r.exec.maxVUs())
	r.flows = make([]vuFlow, r.exec.maxVUs())
	return r, nil
}

// prepareStep parses a step's templates and binds their data references to
// table (nil without a data file, when Validate has refused any).
func prepareStep(s HTTPStep, table *dataTable, slotOf map[string]int, secrets map[string]string) (preparedStep, error) {
	st := preparedStep{name: s.Name, method: s.Method, header: http.Header{}, thinkTime: s.ThinkTime}
	if st.method == "" {
		st.method = http.MethodGet
	}
	if len(s.ExpectStatus) > 0 {
		st.expect = slices.Clone(s.ExpectStatus)
	}
	if s.ExpectBody != "" {
		st.expectBody = []byte(s.ExpectBody)
	}
	var err error
	if st.url, err = parseBound(s.URL, table); err != nil {
		return st, fmt.Errorf("url: %w", err)
	}
	if st.body, err = parseBound(s.Body, table); err != nil {
		return st, fmt.Errorf("body: %w", err)
	}
	if err := st.body.bindSecrets(secrets); err != nil {
		return st, fmt.Errorf("body: %w", err)
	}
	if st.needs, err = st.url.bindVars(slotOf, st.needs); err != nil {
		return st, fmt.Errorf("url: %w", err)
	}
	if st.needs, err = st.body.bindVars(slotOf, st.needs); err != nil {
		return st, fmt.Errorf("body: %w", err)
	}
	if !st.url.dynamic {
		if st.parsed, err = url.Parse(st.url.static); err != nil {
			return st, fmt.Errorf("url: %w", err)
		}
	}
	for _, c := range s.Captures {
		pc := preparedCapture{HTTPCapture: c, slot: slotOf[c.Name]}
		switch c.Source {
		case CaptureRegex:
			if pc.re, err = compileFlowRegex(c.Expr, true); err != nil {
				return st, fmt.Errorf("capture %s: %w", c.Name, err)
			}
			st.wantBody = true
		case CaptureJSON:
			st.wantBody = true
		case CaptureHeader:
			st.wantHead = true
		case CaptureCookie:
			st.wantCookies = true
		}
		st.captures = append(st.captures, pc)
	}
	for _, c := range s.Checks {
		pc := preparedCheck{HTTPCheck: c}
		if c.Op == OpMatches {
			if pc.re, err = compileFlowRegex(c.Value, false); err != nil {
				return st, fmt.Errorf("check %s: %w", c.Name, err)
			}
		}
		switch c.Kind {
		case CheckJSON, CheckBodyContains:
			st.wantBody = true
		case CheckHeader:
			st.wantHead = true
		}
		st.checks = append(st.checks, pc)
	}
	// Sorted so that two spellings of one header ("x-a" and "X-A") are
	// sent in the same order every run.
	keys := make([]string, 0, len(s.Headers))
	for k := range s.Headers {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		t, err := parseBound(s.Headers[k], table)
		if err != nil {
			return st, fmt.Errorf("header %s: %w", k, err)
		}
		if err := t.bindSecrets(secrets); err != nil {
			return st, fmt.Errorf("header %s: %w", k, err)
		}
		if st.needs, err = t.bindVars(slotOf, st.needs); err != nil {
			return st, fmt.Errorf("header %s: %w", k, err)
		}
		if http.CanonicalHeaderKey(k) == "Cookie" {
			st.ownCookie = true
		}
		switch {
		case http.CanonicalHeaderKey(k) == "Host":
			st.host = t
		case t.dynamic:
			st.dynHeaders = append(st.dynHeaders, dynHeader{key: k, value: t})
		default:
			st.header.Add(k, t.static)
		}
	}
	if st.header.Get("User-Agent") == "" && !slices.ContainsFunc(st.dynHeaders, func(d dynHeader) bool {
		return http.CanonicalHeaderKey(d.key) == "User-Agent"
	}) {
		st.header.Set("User-Agent", defaultUserAgent)
	}
	// Validate checked the URL; building one request now catches what it
	// could not, before any VU starts.
	if _, err := http.NewRequest(st.method, st.url.sample(), nil); err != nil {
		return st, err
	}
	return st, nil
}

// parseBound parses a template and binds its data references.
func parseBound(s string, table *dataTable) (*template, error) {
	t, err := parseTemplate(s)
	if err != nil {
		return nil, err
	}
	if !t.usesData() {
		return t, nil
	}
	if table == nil {
		return nil, errors.New("{{data.<column>}} without a data file")
	}
	if err := t.bind(table); err != nil {
		return nil, err
	}
	return t, nil
}

// Run drives the executor. Concurrency: each VU is a goroutine. VUs spend
// their time waiting on the network, so they are not bounded by the
// workflow's cores (a semaphore per core would only cap concurrency, which
// is the job file's vus); the Go scheduler already runs at most GOMAXPROCS
// of them at once. What the cores do size is the stats recorder's shards,
// the part every VU contends on.
//
// Besides the VUs (owned by the executor) Run owns two goroutines, both
// stopped before it returns: the reporter (when env.Report is set) and the
// series sampler, which folds the per-second series and samples live VUs
// whether or not anyone is listening, so the series stays bounded.
func (r *httpRunner) Run(ctx context.Context, env Env) (Result, error) {
	env = env.withDefaults()
	log := env.Logger.With("workflow", r.name, "workflow_type", "http")
	names := make([]string, len(r.steps))
	for i, st := range r.steps {
		names[i] = st.name
	}
	p := r.params
	checks := make([][]string, len(r.steps))
	for i, st := range r.steps {
		for _, c := range st.checks {
			checks[i] = append(checks[i], c.Name)
		}
	}
	rec := newRecorder(names, checks, env.parallelism(), p.Model == OpenModel)
	start := env.Now()
	secOf := func(t time.Time) int64 { return int64(max(t.Sub(start), 0) / time.Second) }
	snap := func() Snapshot {
		s := rec.snapshot(env.Now().Sub(start))
		s.VUs = r.exec.liveVUs()
		return s
	}
	rep := startReporter(env, snap)
	sampler := startLoop(seriesSampleInterval, func() {
		rec.collectSeries(env.Now().Sub(start), r.exec.liveVUs(), false)
	})
	log.Info("http workflow starting", "model", p.Model, "vus", p.VUs, "duration", p.Duration,
		"iterations", p.Iterations, "rate", p.Rate, "stages", len(p.Stages), "max_vus", p.MaxVUs,
		"connection_reuse", !p.NoConnectionReuse, "protocol", p.Protocol, "steps", len(r.steps), "cores", len(env.Cores),
		"cookies", r.cookies, "redirects", r.redirects, "captured_values", len(r.slotVU),
		"shards", len(rec.shards))

	var stopErr error
	if r.nSetup > 0 {
		if err := r.setup(ctx, rec.shard(0), env.Now, secOf); err != nil {
			log.Warn("http workflow: setup failed; no load was sent", "err", err)
			stopErr = err
			if ctx.Err() == nil {
				// The target refused it; another worker would be refused too.
				stopErr = &PermanentError{Err: err}
			}
		}
	}
	xenv := execEnv{now: env.Now, dropped: func(intended time.Time) { rec.drop(secOf(intended)) }}
	if stopErr == nil {
		r.runLoad(ctx, xenv, rec, env, secOf, log)
	}
	if stopErr == nil && ctx.Err() != nil {
		stopErr = fmt.Errorf("http workflow stopped early: %w", stopCause(ctx))
	}
	sampler.stop()
	rep.stop()
	// Every VU has returned, so no connection is in use.
	if err := r.sender.close(); err != nil {
		log.Warn("http workflow: closing connections failed", "err", err)
	}

	rec.collectSeries(env.Now().Sub(start), 0, true)
	final := snap()
	if env.Report != nil {
		env.Report(final)
	}
	log.Info("http workflow finished", "completed", final.Completed, "failed", final.Failed,
		"dropped_iterations", final.DroppedIterations, "elapsed", final.Elapsed, "stopped_early", stopErr != nil)
	if stopErr != nil {
		return Result{final}, stopErr
	}
	return Result{final}, nil
}

// runLoad runs the iterations, logging the first failure of each kind.
func (r *httpRunner) runLoad(ctx context.Context, xenv execEnv, rec *recorder, env Env, secOf func(time.Time) int64, log *slog.Logger) {
	var logged sync.Map // (step, class) -> true: log each kind of failure once
	r.exec.run(ctx, xenv, func(ctx context.Context, it iterInfo, stopping <-chan struct{}) {
		ran := r.iterate(ctx, it, stopping, rec.shard(it.vu), env.Now, secOf, func(step int, o outcome, err error) {
			type key struct {
				step  int
				class ErrorClass
			}
			if _, seen := logged.LoadOrStore(key{step, o.class}, true); !seen {
				log.Warn("http step failed; further failures of this class are counted, not logged",
					"step", r.steps[step].name, "class", o.class, "err", err)
			}
		})
		// A pass whose last request completed counts even if the run was
		// stopped a moment later: a resumed run subtracts the counted
		// iterations, and an uncounted finished pass would be sent again.
		if ran {
			rec.iterations.Add(1)
		}
	})
}

// iterate runs one pass over the steps for it, recording each outcome, and
// reports whether the pass ran to its end: every step sent and none cut
// off by the run's stop.
//
// Under the open model the iteration may start late: the scheduler found
// every VU busy and it waited for one (executor_open.go). Each step's
// corrected latency is its latency plus that lag, i.e. measured from when
// the step would have started had the iteration started on time; for the
// first step that is exactly "from the intended start". Think time is not
// in any latency.
func (r *httpRunner) iterate(ctx context.Context, it iterInfo, stopping <-chan struct{}, shard *recorderShard,
	now func() time.Time, secOf func(time.Time) int64, failed func(step int, o outcome, err error)) bool {
	var lag time.Duration
	if !it.intended.IsZero() {
		lag = max(now().Sub(it.intended), 0)
	}
	// One row per iteration, so the steps of a pass (log in, then fetch the
	// profile) act as the same user.
	vu := r.params.VUOffset + it.vu
	fl := &r.flows[it.vu]
	vars := tmplVars{vu: vu + 1, iteration: it.n, row: r.data.row(vu), captured: fl.startIteration(r.slotVU, r.seed)}
	rec := iterRecorder{shard: shard, lag: lag, secOf: secOf, now: now}
	for i := r.nSetup; i < len(r.steps); i++ {
		if ctx.Err() != nil {
			return false
		}
		// An open-model iteration was due before the schedule ended (the
		// executor hands over nothing after it), so it sends its first
		// step even if the machine stalled until past the end: stopping
		// here would leave it neither completed nor dropped.
		if i > 0 || it.intended.IsZero() {
			select {
			case <-stopping:
				return false
			default:
			}
		}
		st := &r.steps[i]
		if missing, ok := fl.missing(st.needs); !ok {
			// Sent with an empty value it would load a different page
			// (or log in as nobody): counted, not sent.
			o := outcome{failed: true, class: ErrorSkipped, sec: secOf(now())}
			shard.record(i, o)
			failed(i, o, fmt.Errorf("step skipped: {{%s}} was not captured", r.slotName(missing)))
			continue
		}
		o, err := r.do(ctx, it.vu, i, vars, now, &rec)
		rec.record(i, o)
		if o.failed {
			failed(i, o, err)
			if o.class == ErrorCancelled {
				return false
			}
		}
		if st.thinkTime > 0 && !think(ctx, stopping, st.thinkTime) {
			return false
		}
	}
	return true
}

// iterRecorder records a step's outcomes for one iteration: the corrected
// latency adds how late the iteration started, and each outcome lands in
// the second it was known in.
type iterRecorder struct {
	shard *recorderShard
	lag   time.Duration
	secOf func(time.Time) int64
	now   func() time.Time
}

func (ir *iterRecorder) record(step int, o outcome) {
	o.corrected = o.latency + ir.lag
	o.sec = ir.secOf(ir.now())
	ir.shard.record(step, o)
}

// slotName is the captured variable with slot s.
func (r *httpRunner) slotName(s int) string {
	for name, i := range r.slotOf {
		if i == s {
			return name
		}
	}
	return "?"
}

// think pauses for d; false if the run ended or is ending meanwhile (no
// further step would start anyway).
func think(ctx context.Context, stopping <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-stopping:
		return false
	}
}

// do sends one step's request, follows its redirects, and classifies the
// outcome. Counting rule: every request sent counts exactly once, as
// completed or failed. A redirect the step follows is a request of its own,
// counted (completed, with its status) and timed under the step through
// hop, as k6 counts each hop under the request's name; the step's
// expectations, captures and checks apply to the last response, whose
// outcome do returns. A request aborted because the run was cancelled
// counts as failed, class cancelled, whether or not it reached the target;
// so after a cancel, the target's count is between ours minus the VUs that
// were mid-request, and ours.
//
// The latency runs from just before the request is sent (a dial included,
// when one is needed) to its last body byte: the whole body is read, so the
// connection can carry the VU's next request, and the step's timeout bounds
// a slow or endless one. With expect_body the read also looks for it,
// keeping only a needle's length of the body at a time.
func (r *httpRunner) do(ctx context.Context, vu, step int, v tmplVars, now func() time.Time, hop *iterRecorder) (outcome, error) {
	st := &r.steps[step]
	fl := &r.flows[vu]
	// The VU's own: passed to the sender (an interface), a local would
	// escape to the heap, an allocation per request.
	rq := &fl.rq
	*rq = hopRequest{method: st.method, url: st.url.render(v), body: st.body.render(v), first: true}
	cur := st.parsed // the URL of the request in flight, parsed when needed
	var kept *keptResponse
	if st.wantBody || st.wantCookies {
		kept = fl.keep()
		kept.cookies = kept.cookies[:0]
	}
	if r.redirects > 0 || r.cookies || st.wantHead || st.wantCookies {
		rq.head = fl.respHead()
	}
	for n := 0; ; n++ {
		body := &r.bodies[vu] // counts the response body; w nil: discard
		*body = countingWriter{}
		var match *bodyMatcher
		if st.expectBody != nil {
			match = &bodyMatcher{needle: st.expectBody}
			body.w = match
		}
		if st.wantBody {
			kept.body.b = kept.body.b[:0]
			if match != nil {
				body.w = io.MultiWriter(match, &kept.body)
			} else {
				body.w = &kept.body
			}
		}
		rq.cookie = ""
		if fl.jar != nil && !st.ownCookie {
			if cur == nil {
				cur, _ = url.Parse(rq.url) // a bad URL fails in send, with its class
			}
			if cur != nil {
				rq.cookie = cookieHeader(fl.jar.Cookies(cur))
			}
		}
		if rq.head != nil {
			rq.head.reset(st.wantHead)
		}
		started := now()
		status, sent, class, err := r.sender.send(ctx, vu, step, v, rq, body)
		latency := now().Sub(started)
		if err != nil {
			return outcome{failed: true, class: class, status: status, sent: sent, received: body.n}, err
		}
		o := outcome{latency: latency, timed: true, status: status, sent: sent, received: body.n}
		if rq.head != nil && len(rq.head.setCookies) > 0 {
			if cur == nil {
				cur, _ = url.Parse(rq.url)
			}
			if r.cookies && cur != nil {
				fl.storeCookies(cur, rq.head.setCookies)
			}
			if st.wantCookies {
				kept.cookies = append(kept.cookies, rq.head.setCookies...)
			}
		}
		if r.redirects > 0 && isRedirect(status) && rq.head.location != "" {
			if n == r.redirects {
				o.failed, o.class = true, ErrorRedirects
				return o, fmt.Errorf("%s %s: still redirected after %d redirects", rq.method, truncate(rq.url, 80), n)
			}
			if cur == nil {
				cur, _ = url.Parse(rq.url)
			}
			next, err := redirectTarget(cur, rq.head.location)
			if err != nil {
				o.failed, o.class = true, ErrorRedirects
				return o, fmt.Errorf("%s %s: %w", rq.method, truncate(rq.url, 80), err)
			}
			hop.record(step, o)
			rq.follow(status, next, st.parsed)
			cur = next
			continue
		}
		return r.judge(st, fl, kept, rq, o, match, body.n)
	}
}

// judge gives the last response of a step its verdict: expected status and
// body, then captures; checks are judged whatever the verdict, since they
// measure the response rather than decide its outcome.
func (r *httpRunner) judge(st *preparedStep, fl *vuFlow, kept *keptResponse, rq *hopRequest, o outcome, match *bodyMatcher, received int64) (outcome, error) {
	var resp *flowResponse
	if len(st.checks) > 0 || len(st.captures) > 0 {
		resp = &flowResponse{status: o.status, latency: o.latency, head: rq.head}
		if kept != nil {
			resp.body, resp.cookies = kept.body.b, kept.cookies
		}
		if resp.head == nil {
			resp.head = &respHead{}
		}
		for k := range st.checks {
			o.checksRun |= 1 << k
			if st.checks[k].pass(resp) {
				o.checksPassed |= 1 << k
			}
		}
	}
	if !st.expects(o.status) {
		o.failed, o.class = true, ErrorStatus
		return o, fmt.Errorf("%s %s: unexpected status %d", rq.method, truncate(rq.url, 80), o.status)
	}
	if match != nil && !match.found {
		o.failed, o.class = true, ErrorBody
		return o, fmt.Errorf("%s %s: body does not contain %q", rq.method, truncate(rq.url, 80), truncate(string(st.expectBody), 40))
	}
	var missed []string
	for k := range st.captures {
		c := &st.captures[k]
		if v, ok := c.capture(resp); ok {
			fl.set(c.slot, v)
		} else {
			missed = append(missed, c.Name)
		}
	}
	if len(missed) > 0 {
		o.failed, o.class = true, ErrorCapture
		return o, fmt.Errorf("%s %s: captured nothing for %s (status %d, %d body bytes)", rq.method,
			truncate(rq.url, 80), strings.Join(missed, ", "), o.status, received)
	}
	return o, nil
}

// countingWriter counts what a response body wrote through it and passes
// it on to w, if any.
type countingWriter struct {
	w io.Writer
	n int64
	_ [40]byte // one per VU, side by side: keep each on its own cache line
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	if c.w == nil {
		return len(p), nil
	}
	return c.w.Write(p)
}

// bodyMatcher is an io.Writer that reports whether needle occurred in what
// was written, across write boundaries, holding at most len(needle)-1 bytes.
type bodyMatcher struct {
	needle []byte
	tail   []byte // the last len(needle)-1 bytes seen
	found  bool
}

func (m *bodyMatcher) Write(p []byte) (int, error) {
	if m.found {
		return len(p), nil
	}
	k := len(m.needle) - 1
	// A match across the seam starts in tail and ends in p's first k bytes.
	if len(m.tail) > 0 && bytes.Contains(append(m.tail, p[:min(len(p), k)]...), m.needle) ||
		bytes.Contains(p, m.needle) {
		m.found = true
		return len(p), nil
	}
	if len(p) >= k {
		m.tail = append(m.tail[:0], p[len(p)-k:]...)
	} else {
		joined := append(m.tail, p...)
		m.tail = append(m.tail[:0], joined[max(0, len(joined)-k):]...) // copy handles the overlap
	}
	return len(p), nil
}

// ReadFrom keeps io.Copy from allocating a buffer per response (net/http's
// path copies bodies with it): the destination's own ReadFrom does the work,
// io.Discard's with a pooled buffer.
func (c *countingWriter) ReadFrom(r io.Reader) (int64, error) {
	dst := c.w
	if dst == nil {
		dst = io.Discard
	}
	n, err := io.Copy(dst, r)
	c.n += n
	return n, err
}

// closed reports whether ch (nil: never) is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
