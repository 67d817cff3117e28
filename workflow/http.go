package workflow

import (
	"fmt"
	"net/url"
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

	maxHeaders      = 64
	maxHeaderLen    = 8 << 10
	maxURLLen       = 8 << 10
	maxBodyLen      = 1 << 20
	maxMethodLen    = 32
	maxExpectStatus = 32
)

// HTTPType is the `http` workflow: virtual users (VUs) loop over a list of
// requests and count each outcome per step, with latencies in an HDR
// histogram. Only the closed model (a fixed number of VUs, each starting its
// next request when the previous one ends) exists so far.
type HTTPType struct{}

// HTTPParams are http's params. Keys 1-5 are taken; the load-test issue
// adds the open model (rate, stages, max_vus), think time, thresholds and
// protocol choice as new keys, each reading its zero value as "not set" so
// that specs encoded before it still mean what they meant.
type HTTPParams struct {
	// VUs is how many virtual users run at once.
	VUs int `cbor:"1,keyasint"`
	// Duration runs the VUs until it has passed; requests in flight then
	// finish (bounded by Timeout). Exactly one of Duration and Iterations.
	Duration time.Duration `cbor:"2,keyasint,omitempty"`
	// Iterations is the total number of passes over the steps, divided
	// among the VUs as evenly as integers allow.
	Iterations int64 `cbor:"3,keyasint,omitempty"`
	// Timeout bounds each request from sending to its last body byte; zero
	// means DefaultRequestTimeout. Job-file key: request_timeout (timeout is
	// the workflow's own).
	Timeout time.Duration `cbor:"4,keyasint,omitempty"`
	Steps   []HTTPStep    `cbor:"5,keyasint"`
}

// HTTPStep is one request of an iteration.
type HTTPStep struct {
	Name string `cbor:"1,keyasint"`
	// Method defaults to GET.
	Method  string            `cbor:"2,keyasint,omitempty"`
	URL     string            `cbor:"3,keyasint"`
	Headers map[string]string `cbor:"4,keyasint,omitempty"`
	Body    string            `cbor:"5,keyasint,omitempty"`
	// ExpectStatus lists the statuses that count as completed; empty means
	// any 2xx or 3xx (redirects are not followed: one step, one request).
	ExpectStatus []int `cbor:"6,keyasint,omitempty"`
}

// Validate reports every problem, with job-file paths.
func (p *HTTPParams) Validate() error {
	var errs FieldErrors
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
		checkRunDuration(&errs, "duration", p.Duration)
	case p.Iterations > MaxIterations:
		errs.add("iterations", "must be at most %d, got %d", int64(MaxIterations), p.Iterations)
	}
	if p.Timeout < 0 || p.Timeout > MaxRequestTimeout {
		errs.add("request_timeout", "must be between 0 (default %s) and %s, got %s",
			fmtDuration(DefaultRequestTimeout), fmtDuration(MaxRequestTimeout), fmtDuration(p.Timeout))
	}
	if len(p.Steps) < 1 || len(p.Steps) > MaxHTTPSteps {
		errs.add("steps", "must have between 1 and %d steps, got %d", MaxHTTPSteps, len(p.Steps))
	}
	seen := map[string]int{}
	for i, st := range p.Steps {
		path := IndexPath("steps", i)
		if err := CheckName(st.Name); err != nil {
			errs.add(JoinPath(path, "name"), "%v", err)
		} else if j, dup := seen[st.Name]; dup {
			errs.add(JoinPath(path, "name"), "duplicate step name %q (also steps[%d])", st.Name, j)
		} else {
			seen[st.Name] = i
		}
		st.validate(&errs, path)
	}
	return errs.err()
}

func (st *HTTPStep) validate(errs *FieldErrors, path string) {
	if st.Method != "" && (len(st.Method) > maxMethodLen || !isToken(st.Method)) {
		errs.add(JoinPath(path, "method"), "must be an HTTP method such as GET or POST, got %q", truncate(st.Method, 40))
	}
	if err := checkURL(st.URL); err != nil {
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
		}
	}
	if len(st.Body) > maxBodyLen {
		errs.add(JoinPath(path, "body"), "must be at most %d bytes, got %d", maxBodyLen, len(st.Body))
	}
	if len(st.ExpectStatus) > maxExpectStatus {
		errs.add(JoinPath(path, "expect_status"), "must list at most %d statuses, got %d", maxExpectStatus, len(st.ExpectStatus))
	}
	for i, code := range st.ExpectStatus {
		if code < 100 || code > 599 {
			errs.add(IndexPath(JoinPath(path, "expect_status"), i), "must be an HTTP status between 100 and 599, got %d", code)
		}
	}
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

// ParseParams reads vus (default 1), duration or iterations,
// request_timeout (default 10s) and steps (name, method (default GET), url,
// headers, body, expect_status).
func (HTTPType) ParseParams(f *Fields) []byte {
	p := HTTPParams{VUs: 1}
	if v, ok := f.Int("vus"); ok {
		p.VUs = int(v)
	}
	if d, ok := f.Duration("duration"); ok {
		p.Duration = d
	}
	if n, ok := f.Int("iterations"); ok {
		p.Iterations = n
	}
	if d, ok := f.Duration("request_timeout"); ok {
		if d <= 0 {
			f.Errorf("request_timeout", "must be greater than 0, got %s", fmtDuration(d))
		}
		p.Timeout = d
	}
	f.Required("steps")
	steps, _ := f.Objects("steps")
	for _, sf := range steps {
		sf.Required("name", "url")
		st := HTTPStep{Method: "GET"}
		st.Name, _ = sf.String("name")
		if m, ok := sf.String("method"); ok {
			st.Method = m
		}
		st.URL, _ = sf.String("url")
		st.Headers, _ = sf.StringMap("headers")
		st.Body, _ = sf.String("body")
		if codes, ok := sf.IntList("expect_status"); ok {
			for _, c := range codes {
				st.ExpectStatus = append(st.ExpectStatus, int(c))
			}
		}
		p.Steps = append(p.Steps, st)
	}
	return f.Encode(&p)
}

// DecodeParams implements Type; the result is a *HTTPParams.
func (HTTPType) DecodeParams(data []byte) (Params, error) {
	p, err := decodeParams[HTTPParams](data)
	if err != nil {
		return nil, err // not a typed nil inside the interface
	}
	return p, nil
}

// New implements Type.
func (HTTPType) New(spec wire.WorkflowSpec) (Runner, error) {
	p, err := decodeParams[HTTPParams](spec.Params)
	if err != nil {
		return nil, err
	}
	return newHTTPRunner(spec.Name, p)
}
