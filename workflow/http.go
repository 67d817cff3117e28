package workflow

import (
	"fmt"
	"math"
	"net/url"
	"slices"
	"strings"
	"time"

	"tempest/wire"
)

// Limits on http params. They bound what one dispatch can make a worker do,
// since params arrive over the network.
const (
	MaxVUs                = 100000
	MaxHTTPSteps          = 64
	MaxIterations         = 1 << 40
	DefaultRequestTimeout = 10 * time.Second
	MaxRequestTimeout     = 10 * time.Minute
	// MaxRate bounds the open model's arrival rate (iterations per second).
	MaxRate = 1e6
	// DefaultOpenMaxVUs is the open model's VU pool bound when max_vus is
	// not set (or vus, if that is larger).
	DefaultOpenMaxVUs = 100
	MaxStages         = 64
	MaxThinkTime      = time.Hour

	maxHeaders      = 64
	maxHeaderLen    = 8 << 10
	maxURLLen       = 8 << 10
	maxBodyLen      = 1 << 20
	maxMethodLen    = 32
	maxExpectStatus = 32
	maxExpectBody   = 64 << 10
)

// HTTPType is the `http` workflow: virtual users (VUs) loop over a list of
// requests and count each outcome per step, with latencies in HDR
// histograms. Load models: closed (a fixed or ramping number of VUs, each
// starting its next iteration when the previous one ends) and open (an
// arrival rate, fixed or ramping, served by a bounded pool of VUs).
type HTTPType struct{}

// LoadModel says how a workflow's iterations are started. The zero value is
// the closed model, which is what specs from before the open model mean.
type LoadModel uint8

// Load models.
const (
	// ClosedModel: VUs loop; throughput follows the target's latency.
	ClosedModel LoadModel = iota
	// OpenModel: iterations start at a rate, whatever the latency.
	OpenModel
)

func (m LoadModel) String() string {
	switch m {
	case ClosedModel:
		return "closed"
	case OpenModel:
		return "open"
	default:
		return fmt.Sprintf("LoadModel(%d)", uint8(m))
	}
}

// HTTPParams are http's params. Every key after 5 reads its zero value as
// "not set", so specs encoded before it still mean what they meant (a
// closed model with vus and duration or iterations, connections reused).
type HTTPParams struct {
	// VUs is how many virtual users run at once (closed model), the VU count
	// a ramp starts from (closed model with stages; may be 0), or the VUs
	// allocated before the first iteration (open model).
	VUs int `cbor:"1,keyasint"`
	// Duration runs the load until it has passed; requests in flight then
	// finish (bounded by Timeout). Closed model: exactly one of Duration and
	// Iterations, or Stages. Open model: required unless Stages are given.
	// With Stages it may extend the run past them, holding the last target.
	Duration time.Duration `cbor:"2,keyasint,omitempty"`
	// Iterations is the total number of passes over the steps, divided
	// among the VUs as evenly as integers allow (closed model only).
	Iterations int64 `cbor:"3,keyasint,omitempty"`
	// Timeout bounds each request from sending to its last body byte; zero
	// means DefaultRequestTimeout. Job-file key: request_timeout (timeout is
	// the workflow's own).
	Timeout time.Duration `cbor:"4,keyasint,omitempty"`
	Steps   []HTTPStep    `cbor:"5,keyasint"`
	Model   LoadModel     `cbor:"6,keyasint,omitempty"`
	// Rate is the open model's arrival rate in iterations per second, or
	// the rate its Stages ramp from.
	Rate float64 `cbor:"7,keyasint,omitempty"`
	// Stages ramp the VU count (closed) or the rate (open) linearly.
	Stages []Stage `cbor:"8,keyasint,omitempty"`
	// MaxVUs bounds the open model's VU pool; zero means the larger of
	// DefaultOpenMaxVUs and VUs. An iteration that finds every VU busy is
	// dropped and counted.
	MaxVUs int `cbor:"9,keyasint,omitempty"`
	// NoConnectionReuse opens a connection per request (job file:
	// connection_reuse: false), to load a target's accept path and TLS
	// handshakes rather than its keep-alive path.
	NoConnectionReuse bool `cbor:"10,keyasint,omitempty"`
	// Protocol is the HTTP version spoken (job file: protocol: http1, h2,
	// h2c or h3; default http1). See Protocol for how each reuses
	// connections.
	Protocol Protocol `cbor:"11,keyasint,omitempty"`
	// InsecureSkipVerify accepts any certificate the target presents, for
	// self-signed targets (job file: insecure_skip_verify: true). It
	// applies to every TLS connection of the run, https:// steps under
	// http1 included.
	InsecureSkipVerify bool `cbor:"12,keyasint,omitempty"`
	// Data is a CSV data file whose columns steps use as {{data.column}}
	// (job file: data: {file: users.csv, mode: sequential}). Nil: none.
	Data *HTTPData `cbor:"13,keyasint,omitempty"`
	// VUOffset numbers this run's VUs from VUOffset+1 ({{vu}}, per_vu data
	// rows), so the shards of a split workflow never share a VU number.
	VUOffset int `cbor:"14,keyasint,omitempty"`
	// NoCookies turns off the VU's cookie jar (job file: cookies: false).
	NoCookies bool `cbor:"15,keyasint,omitempty"`
	// Redirects is how many redirects a step follows (job file: redirects:
	// N); zero means DefaultRedirects and NoRedirects (redirects: 0) none.
	Redirects   int  `cbor:"16,keyasint,omitempty"`
	NoRedirects bool `cbor:"17,keyasint,omitempty"`
	// Secrets are the values of the {{secret.NAME}} references in the
	// steps' header values and bodies, by name (http_secrets.go). Params
	// are never shown back by status, results or logs.
	Secrets map[string]string `cbor:"18,keyasint,omitempty"`
	// Setup steps run once per run (so once per shard) before the first
	// iteration; what they capture every VU reads (a login token fetched
	// once). A setup step that fails fails the run before any load is
	// sent. See http_setup.go.
	Setup []HTTPStep `cbor:"19,keyasint,omitempty"`
	// TLS is the CA to trust and the client certificate to present (job
	// file: tls:); nil: the system roots and no client certificate.
	TLS *HTTPTLS `cbor:"20,keyasint,omitempty"`
	// GRPC is a grpc workflow's .proto file (Protocol is ProtocolGRPC);
	// nil for http workflows.
	GRPC *GRPC `cbor:"21,keyasint,omitempty"`
}

// DefaultRedirects is how many redirects a step follows unless the job file
// says otherwise, as browsers and k6 do.
const (
	DefaultRedirects = 10
	MaxRedirects     = 50
)

// redirectLimit is how many redirects a step follows.
func (p *HTTPParams) redirectLimit() int {
	switch {
	case p.NoRedirects:
		return 0
	case p.Redirects == 0:
		return DefaultRedirects
	}
	return p.Redirects
}

// HTTPStep is one request of an iteration. URL, header values and Body may
// hold templates ({{vu}}, {{iteration}}, {{random_int a b}}, {{data.column}}).
type HTTPStep struct {
	Name string `cbor:"1,keyasint"`
	// Method defaults to GET.
	Method  string            `cbor:"2,keyasint,omitempty"`
	URL     string            `cbor:"3,keyasint"`
	Headers map[string]string `cbor:"4,keyasint,omitempty"`
	Body    string            `cbor:"5,keyasint,omitempty"`
	// ExpectStatus lists the statuses the step's last response (after
	// redirects) must have to count as completed; empty means any 2xx or
	// 3xx.
	ExpectStatus []int `cbor:"6,keyasint,omitempty"`
	// ThinkTime is a pause after the step, part of the iteration (a VU is
	// busy during it) but not of any latency.
	ThinkTime time.Duration `cbor:"7,keyasint,omitempty"`
	// ExpectBody, when set, must occur in the response body; a response
	// without it counts as failed with class body.
	ExpectBody string `cbor:"8,keyasint,omitempty"`
	// Captures take values from the step's response into the VU's
	// variables ({{name}} in later steps); CaptureScope says how long they
	// last. Checks are counted assertions on it. See flow.go.
	Captures     []HTTPCapture `cbor:"9,keyasint,omitempty"`
	CaptureScope CaptureScope  `cbor:"10,keyasint,omitempty"`
	Checks       []HTTPCheck   `cbor:"11,keyasint,omitempty"`
	// WS is a websocket step's exchange (Body is the message it sends);
	// nil for http and grpc steps.
	WS *WSExchange `cbor:"12,keyasint,omitempty"`
}

// openMaxVUs is the open model's pool bound.
func (p *HTTPParams) openMaxVUs() int {
	if p.MaxVUs > 0 {
		return p.MaxVUs
	}
	return max(DefaultOpenMaxVUs, p.VUs)
}

// Validate reports every problem, with job-file paths.
func (p *HTTPParams) Validate() error {
	var errs FieldErrors
	switch {
	case p.Model == OpenModel:
		p.validateOpen(&errs)
	case p.Model != ClosedModel:
		errs.add("model", "must be closed or open, got %s", p.Model)
	case len(p.Stages) > 0:
		p.validateRampingVUs(&errs)
	default:
		p.validateClosed(&errs)
	}
	p.validateProtocol(&errs)
	p.validateGRPC(&errs)
	p.TLS.validate(&errs, p.InsecureSkipVerify)
	if p.Timeout < 0 || p.Timeout > MaxRequestTimeout {
		errs.add("request_timeout", "must be between 0 (default %s) and %s, got %s",
			fmtDuration(DefaultRequestTimeout), fmtDuration(MaxRequestTimeout), fmtDuration(p.Timeout))
	}
	if len(p.Steps) < 1 || len(p.Steps) > MaxHTTPSteps {
		errs.add("steps", "must have between 1 and %d steps, got %d", MaxHTTPSteps, len(p.Steps))
	}
	switch {
	case p.Redirects < 0 || p.Redirects > MaxRedirects:
		errs.add("redirects", "must be between 0 (none followed) and %d, got %d", MaxRedirects, p.Redirects)
	case p.NoRedirects && p.Redirects != 0:
		errs.add("redirects", "cannot both follow %d redirects and none", p.Redirects)
	}
	table := p.Data.validate(&errs)
	p.validateSetup(&errs)
	seen := map[string]string{}
	p.eachStep(func(path string, st *HTTPStep) {
		if err := CheckName(st.Name); err != nil {
			errs.add(JoinPath(path, "name"), "%v", err)
		} else if other, dup := seen[st.Name]; dup {
			errs.add(JoinPath(path, "name"), "duplicate step name %q (also %s)", st.Name, other)
		} else {
			seen[st.Name] = path
		}
		st.validate(&errs, path, p.Data, table, p.Protocol)
		st.validateFlow(&errs, path, p.Protocol)
	})
	p.validateVars(&errs)
	p.validateSecrets(&errs)
	return errs.err()
}

// PlannedDuration implements Planner: how long the load runs by its
// duration or stages; zero for a run of a number of iterations, whose
// length depends on the target.
// StepNames lists the steps in their order, for the submit-time check of
// thresholds that name one.
func (p *HTTPParams) StepNames() []string {
	names := make([]string, 0, len(p.Setup)+len(p.Steps))
	p.eachStep(func(_ string, st *HTTPStep) { names = append(names, st.Name) })
	return names
}

// CheckNames lists the steps' check names, each once, in order, for the
// submit-time check of thresholds that name one.
func (p *HTTPParams) CheckNames() []string {
	var names []string
	p.eachStep(func(_ string, st *HTTPStep) {
		for _, c := range st.Checks {
			if !slices.Contains(names, c.Name) {
				names = append(names, c.Name)
			}
		}
	})
	return names
}

func (p *HTTPParams) PlannedDuration() time.Duration {
	var stages time.Duration
	for _, st := range p.Stages {
		stages += st.Duration
	}
	return max(p.Duration, stages)
}

// validateClosed checks the closed model with a fixed VU count.
func (p *HTTPParams) validateClosed(errs *FieldErrors) {
	if p.VUs < 1 || p.VUs > MaxVUs {
		errs.add("vus", "must be between 1 and %d, got %d", MaxVUs, p.VUs)
	}
	switch {
	case p.Duration < 0 || p.Iterations < 0 || (p.Duration == 0 && p.Iterations == 0):
		if p.Duration < 0 {
			errs.add("duration", "must be greater than 0, got %s", fmtDuration(p.Duration))
		}
		if p.Iterations < 0 {
			errs.add("iterations", "must be greater than 0, got %d", p.Iterations)
		}
		if p.Duration == 0 && p.Iterations == 0 {
			// Reported at duration, whose line is the closest guess.
			errs.add("duration", "one of duration or iterations is required, greater than 0")
		}
	case p.Duration > 0 && p.Iterations > 0:
		errs.add("iterations", "cannot be combined with duration; set one of them")
	case p.Duration > 0:
		checkRunDuration(errs, "duration", p.Duration)
	case p.Iterations > MaxIterations:
		errs.add("iterations", "must be at most %d, got %d", int64(MaxIterations), p.Iterations)
	}
	p.refuseOpenOnly(errs)
}

// validateRampingVUs checks the closed model with stages of VU targets.
func (p *HTTPParams) validateRampingVUs(errs *FieldErrors) {
	if p.VUs < 0 || p.VUs > MaxVUs {
		errs.add("vus", "must be between 0 and %d (the VUs the stages start from), got %d", MaxVUs, p.VUs)
	}
	if p.Iterations != 0 {
		errs.add("iterations", "cannot be combined with stages, which set how long the run lasts")
	}
	peak := p.VUs
	for i, st := range p.Stages {
		tp := JoinPath(IndexPath("stages", i), "target")
		if st.Target != math.Trunc(st.Target) || st.Target < 0 || st.Target > MaxVUs {
			errs.add(tp, "must be a whole number of VUs between 0 and %d, got %v", MaxVUs, st.Target)
			continue
		}
		peak = max(peak, int(st.Target))
	}
	p.checkStages(errs)
	if peak < 1 {
		errs.add("stages", "no stage has a VU target above 0, so nothing would run")
	}
	p.refuseOpenOnly(errs)
}

func (p *HTTPParams) refuseOpenOnly(errs *FieldErrors) {
	if p.Rate != 0 {
		errs.add("rate", "only applies to the open model (model: open)")
	}
	if p.MaxVUs != 0 {
		errs.add("max_vus", "only applies to the open model (model: open); the closed model runs vus")
	}
}

// validateOpen checks the open model.
func (p *HTTPParams) validateOpen(errs *FieldErrors) {
	if !(p.Rate >= 0 && p.Rate <= MaxRate) { // also refuses NaN
		errs.add("rate", "must be between 0 and %d iterations per second, got %v", int(MaxRate), p.Rate)
	}
	if p.Iterations != 0 {
		errs.add("iterations", "does not apply to the open model, which runs for a duration at a rate")
	}
	if p.MaxVUs < 0 || p.MaxVUs > MaxVUs {
		errs.add("max_vus", "must be between 1 and %d, got %d", MaxVUs, p.MaxVUs)
	}
	if p.VUs < 0 || p.VUs > MaxVUs {
		errs.add("vus", "must be between 0 and %d (VUs allocated before the first iteration), got %d", MaxVUs, p.VUs)
	} else if p.MaxVUs > 0 && p.VUs > p.MaxVUs {
		errs.add("vus", "allocates %d VUs up front, more than max_vus (%d)", p.VUs, p.MaxVUs)
	}
	if len(p.Stages) == 0 {
		if p.Rate == 0 {
			errs.add("rate", "is required for the open model, greater than 0")
		}
		if p.Duration <= 0 {
			errs.add("duration", "is required for the open model, greater than 0, got %s", fmtDuration(p.Duration))
		} else {
			checkRunDuration(errs, "duration", p.Duration)
		}
		return
	}
	peak := p.Rate
	for i, st := range p.Stages {
		if !(st.Target >= 0 && st.Target <= MaxRate) {
			errs.add(JoinPath(IndexPath("stages", i), "target"), "must be a rate between 0 and %d iterations per second, got %v", int(MaxRate), st.Target)
			continue
		}
		peak = max(peak, st.Target)
	}
	p.checkStages(errs)
	if peak <= 0 {
		errs.add("stages", "the rate never rises above 0, so nothing would run")
	}
}

// checkStages checks stage durations and how they combine with Duration.
func (p *HTTPParams) checkStages(errs *FieldErrors) {
	if len(p.Stages) > MaxStages {
		errs.add("stages", "must have at most %d stages, got %d", MaxStages, len(p.Stages))
	}
	var total time.Duration
	for i, st := range p.Stages {
		if st.Duration < 0 || st.Duration > MaxRunDuration {
			errs.add(JoinPath(IndexPath("stages", i), "duration"), "must be between 0 and %s, got %s", fmtDuration(MaxRunDuration), fmtDuration(st.Duration))
			continue
		}
		total += st.Duration
	}
	switch {
	case p.Duration < 0:
		errs.add("duration", "must be greater than 0, got %s", fmtDuration(p.Duration))
	case p.Duration > 0 && p.Duration < total:
		errs.add("duration", "is %s, shorter than the stages, which last %s; leave it out or make it at least that",
			fmtDuration(p.Duration), fmtDuration(total))
	}
	if run := max(total, p.Duration); run <= 0 || run > MaxRunDuration {
		errs.add("stages", "must last more than 0 and at most %s in all, got %s", fmtDuration(MaxRunDuration), fmtDuration(run))
	}
}

// validate checks a step; data and table are the workflow's data file and
// its parsed table (see template.checkData).
func (st *HTTPStep) validate(errs *FieldErrors, path string, data *HTTPData, table *dataTable, proto Protocol) {
	checkURL := func(s string) error { return checkStepURL(s, proto) }
	if proto == ProtocolWebSocket {
		st.WS.validate(errs, path, st.Body)
	}
	if proto == ProtocolGRPC && st.Method != "" && st.Method != "GET" {
		// parseSteps defaults it; the gRPC method is in the URL.
		errs.add(JoinPath(path, "method"), "does not apply to grpc steps, whose url names the method")
	}
	if st.Method != "" && (len(st.Method) > maxMethodLen || !isToken(st.Method)) {
		errs.add(JoinPath(path, "method"), "must be an HTTP method such as GET or POST, got %q", truncate(st.Method, 40))
	}
	if st.URL != "" && len(st.URL) <= maxURLLen {
		// A templated URL must still be one once rendered; the sample
		// rendering (with the data file's first row) stands in for every
		// request's.
		if t, err := parseTemplate(st.URL); err != nil {
			errs.add(JoinPath(path, "url"), "%v", err)
		} else if err := t.checkData(data, table); err != nil {
			errs.add(JoinPath(path, "url"), "%v", err)
		} else if err := checkURL(t.sample()); err != nil && (table != nil || !t.usesData()) && !t.usesVars() {
			errs.add(JoinPath(path, "url"), "%v", err)
		}
	} else if err := checkURL(st.URL); err != nil {
		errs.add(JoinPath(path, "url"), "%v", err)
	}
	if len(st.Headers) > maxHeaders {
		errs.add(JoinPath(path, "headers"), "must have at most %d headers, got %d", maxHeaders, len(st.Headers))
	}
	for k, v := range st.Headers {
		hp := JoinPath(JoinPath(path, "headers"), k)
		if len(k) > maxHeaderLen || !isToken(k) {
			errs.add(hp, "is not a valid header name")
		}
		if len(v) > maxHeaderLen || !validHeaderValue(v) {
			errs.add(hp, "value must be at most %d bytes with no control characters", maxHeaderLen)
		} else if t, err := parseTemplate(v); err != nil {
			errs.add(hp, "%v", err)
		} else if err := t.checkData(data, table); err != nil {
			errs.add(hp, "%v", err)
		} else if err := t.checkHeaderRows(table); err != nil {
			// Numbers render as digits, but a data value is anyone's text.
			errs.add(hp, "%v", err)
		}
	}
	if len(st.Body) > maxBodyLen {
		errs.add(JoinPath(path, "body"), "must be at most %d bytes, got %d", maxBodyLen, len(st.Body))
	} else if t, err := parseTemplate(st.Body); err != nil {
		errs.add(JoinPath(path, "body"), "%v", err)
	} else if err := t.checkData(data, table); err != nil {
		errs.add(JoinPath(path, "body"), "%v", err)
	}
	if len(st.ExpectStatus) > maxExpectStatus {
		errs.add(JoinPath(path, "expect_status"), "must list at most %d statuses, got %d", maxExpectStatus, len(st.ExpectStatus))
	}
	for i, code := range st.ExpectStatus {
		if err := checkStatus(code, proto); err != nil {
			errs.add(IndexPath(JoinPath(path, "expect_status"), i), "%v", err)
		}
	}
	if st.ThinkTime < 0 || st.ThinkTime > MaxThinkTime {
		errs.add(JoinPath(path, "think_time"), "must be between 0 and %s, got %s", fmtDuration(MaxThinkTime), fmtDuration(st.ThinkTime))
	}
	if len(st.ExpectBody) > maxExpectBody {
		errs.add(JoinPath(path, "expect_body"), "must be at most %d bytes, got %d", maxExpectBody, len(st.ExpectBody))
	}
}

// checkStatus checks an expected status: an HTTP status, or for a grpc
// step a gRPC status code.
func checkStatus(code int, proto Protocol) error {
	if proto == ProtocolWebSocket {
		if code != wsStatus {
			return fmt.Errorf("must be %d (an exchange's status; a failed one fails with its class), got %d", wsStatus, code)
		}
		return nil
	}
	if proto == ProtocolGRPC {
		if !validGRPCCode(code) {
			return fmt.Errorf("must be a gRPC status code between 0 (OK) and 16, got %d", code)
		}
		return nil
	}
	if code < 100 || code > 599 {
		return fmt.Errorf("must be an HTTP status between 100 and 599, got %d", code)
	}
	return nil
}

// checkStepURL checks a step's URL for its protocol.
func checkStepURL(s string, proto Protocol) error {
	switch proto {
	case ProtocolWebSocket:
		return checkWSURL(s)
	case ProtocolGRPC:
	default:
		return checkURL(s)
	}
	if s == "" {
		return fmt.Errorf("is required")
	}
	if len(s) > maxURLLen {
		return fmt.Errorf("must be at most %d bytes, got %d", maxURLLen, len(s))
	}
	_, err := parseGRPCURL(s)
	return err
}

func checkURL(s string) error {
	if s == "" {
		return fmt.Errorf("is required")
	}
	if len(s) > maxURLLen {
		return fmt.Errorf("must be at most %d bytes, got %d", maxURLLen, len(s))
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("must be an http:// or https:// URL with a host, got %q", truncate(s, 80))
	}
	return nil
}

// isToken reports whether s is an RFC 9110 token (method and header names).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// validHeaderValue refuses control characters other than tab, so a value
// cannot smuggle a second header or request onto the connection.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// Name implements Type.
func (HTTPType) Name() string { return "http" }

// ParseParams reads the load model (model: closed or open, default closed,
// or open when rate or max_vus is given; vus, default 1 (0 with stages);
// duration or iterations; rate; stages of {duration, target}; max_vus),
// request_timeout (default 10s), connection_reuse (default true), protocol
// (http1, h2, h2c or h3; default http1), insecure_skip_verify (default
// false), cookies (default true), redirects (default 10; 0: none followed),
// data ({file, mode}: a CSV data file, read through f.DataFile) and steps
// (name, method (default GET), url, headers, body, expect_status,
// expect_body, think_time, captures, capture_scope, checks) and setup
// (steps as those, without capture_scope).
func (HTTPType) ParseParams(f *Fields) []byte {
	p := parseLoad(f)
	if reuse, ok := f.Bool("connection_reuse"); ok {
		p.NoConnectionReuse = !reuse
	}
	if s, ok := f.String("protocol"); ok {
		if proto, known := parseProtocol(s); known {
			p.Protocol = proto
		} else {
			f.Errorf("protocol", "must be one of http1, h2, h2c or h3, got %q", truncate(s, 40))
		}
	}
	p.InsecureSkipVerify, _ = f.Bool("insecure_skip_verify")
	p.TLS = parseTLS(f)
	if c, ok := f.Bool("cookies"); ok {
		p.NoCookies = !c
	}
	if n, ok := f.Int("redirects"); ok {
		switch {
		case n == 0:
			p.NoRedirects = true
		case n < 0 || n > MaxRedirects:
			f.Errorf("redirects", "must be between 0 (none followed) and %d, got %d", MaxRedirects, n)
		default:
			p.Redirects = int(n)
		}
	}
	parseRequests(f, &p)
	return f.Encode(&p)
}

// parseLoad reads the load model's keys, which every type built on the
// http engine shares.
func parseLoad(f *Fields) HTTPParams {
	p := HTTPParams{VUs: 1}
	if s, ok := f.String("model"); ok {
		switch s {
		case "closed":
			p.Model = ClosedModel
		case "open":
			p.Model = OpenModel
		default:
			f.Errorf("model", "must be closed or open, got %q", truncate(s, 40))
		}
	} else if f.Has("rate") || f.Has("max_vus") {
		p.Model = OpenModel
	}
	if f.Has("stages") && !f.Has("vus") {
		p.VUs = 0 // a ramp starts from nothing unless told otherwise
	}
	if v, ok := f.Int("vus"); ok {
		p.VUs = int(v)
	}
	if d, ok := f.Duration("duration"); ok {
		p.Duration = d
	}
	if n, ok := f.Int("iterations"); ok {
		p.Iterations = n
	}
	if r, ok := f.Float("rate"); ok {
		p.Rate = r
	}
	if v, ok := f.Int("max_vus"); ok {
		if v < 1 {
			f.Errorf("max_vus", "must be at least 1, got %d", v)
		}
		p.MaxVUs = int(v)
	}
	stages, _ := f.Objects("stages")
	for _, sf := range stages {
		sf.Required("duration", "target")
		var st Stage
		st.Duration, _ = sf.Duration("duration")
		st.Target, _ = sf.Float("target")
		p.Stages = append(p.Stages, st)
	}
	return p
}

// DecodeParams implements Type; the result is a *HTTPParams.
func (HTTPType) DecodeParams(data []byte) (Params, error) {
	p, err := decodeParams[HTTPParams](data)
	if err != nil {
		return nil, err // not a typed nil inside the interface
	}
	return p, nil
}

// parseSteps reads the steps under key (steps, or setup, whose steps have
// no capture_scope: what they capture lasts the run).
func parseSteps(f *Fields, key string, p *HTTPParams) []HTTPStep {
	items, _ := f.Objects(key)
	var out []HTTPStep
	for _, sf := range items {
		sf.Required("name", "url")
		st := HTTPStep{Method: "GET"}
		st.Name, _ = sf.String("name")
		if m, ok := sf.String("method"); ok {
			st.Method = m
		}
		st.URL, _ = sf.String("url")
		st.Headers, _ = sf.StringMap("headers")
		if p.Protocol != ProtocolWebSocket {
			st.Body, _ = sf.String("body")
		}
		if codes, ok := sf.IntList("expect_status"); ok {
			for _, c := range codes {
				st.ExpectStatus = append(st.ExpectStatus, int(c))
			}
		}
		st.ExpectBody, _ = sf.String("expect_body")
		st.ThinkTime, _ = sf.Duration("think_time")
		if p.Protocol == ProtocolWebSocket {
			st.Method = ""
			st.Body, _ = sf.String("send")
			st.WS = parseWSExchange(sf)
		}
		parseCaptures(sf, &st, key == "steps")
		parseChecks(sf, &st)
		p.Secrets = readSecrets(sf, &st, p.Secrets)
		out = append(out, st)
	}
	return out
}

// parseRequests reads what every request-driven type (http, grpc,
// websocket) shares after its own keys: the per-request timeout, data
// rows, setup and steps.
func parseRequests(f *Fields, p *HTTPParams) {
	if d, ok := f.Duration("request_timeout"); ok {
		if d <= 0 {
			f.Errorf("request_timeout", "must be greater than 0, got %s", fmtDuration(d))
		}
		p.Timeout = d
	}
	p.Data = parseData(f)
	f.Required("steps")
	p.Setup = parseSteps(f, "setup", p)
	p.Steps = parseSteps(f, "steps", p)
}

// parseData reads `data: {file: users.csv, mode: sequential}`; mode is
// sequential (default), random or per_vu.
func parseData(f *Fields) *HTTPData {
	df, ok := f.Object("data")
	if !ok {
		return nil
	}
	df.Required("file")
	d := &HTTPData{}
	if name, text, ok := df.DataFile("file"); ok {
		d.File, d.CSV = name, text
		// Both for now, so Validate checks the text; DetachBlobs drops the
		// text once the whole job file is checked.
		d.Blob, _ = df.DataBlob(name)
	}
	if s, ok := df.String("mode"); ok {
		if m, known := parseDataMode(s); known {
			d.Mode = m
		} else {
			df.Errorf("mode", "must be sequential, random or per_vu, got %q", truncate(s, 40))
		}
	}
	return d
}

// New implements Type.
func (HTTPType) New(spec wire.WorkflowSpec) (Runner, error) {
	p, err := decodeParams[HTTPParams](spec.Params)
	if err != nil {
		return nil, err
	}
	return newHTTPRunner(spec.Name, p)
}
