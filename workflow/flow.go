package workflow

import (
	"bytes"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/tidwall/gjson"
)

// A flow is what makes an iteration a user's session rather than a list of
// unrelated requests: captures take values out of one step's response for
// later steps ({{name}}), and checks measure a response without failing it.
//
//	steps:
//	  - name: login
//	    method: POST
//	    url: http://app/login
//	    captures:
//	      - {name: token, json: data.token}          # gjson path into a JSON body
//	      - {name: csrf, regex: 'csrf=([0-9a-f]+)'}   # first group of a regular expression
//	      - {name: reqid, header: X-Request-Id}       # a response header
//	      - {name: sid, cookie: session}              # a cookie the response set
//	    capture_scope: vu                             # keep them for the VU's life (default: iteration)
//	    checks:
//	      - {name: ok, status: 200}
//	      - {name: has-token, json: data.token, exists: true}
//	      - {name: admin, json: user.role, equals: admin}
//	      - {name: numeric-id, json: id, matches: '^[0-9]+$'}
//	      - {name: welcome, body_contains: Welcome}
//	      - {name: is-json, header: Content-Type, matches: json}
//	      - {name: fast, duration_below: 200ms}
//	  - name: profile
//	    url: http://app/me
//	    headers: {Authorization: "Bearer {{token}}"}

// Limits on captures and checks: they arrive over the network, and each
// costs something per response.
const (
	maxCaptures     = 16
	maxChecks       = 32
	maxFlowExprLen  = 1 << 10
	maxCaptureValue = maxHeaderLen
	// maxFlowBody bounds the body a VU keeps for captures and checks that
	// read it: a response longer than this is read whole (and counted) but
	// only its first maxFlowBody bytes are looked at.
	maxFlowBody = 1 << 20
)

// CaptureSource says where a capture looks.
type CaptureSource uint8

// Capture sources. The zero value is invalid, so a spec that lost its
// source is refused rather than read as one.
const (
	CaptureJSON   CaptureSource = iota + 1 // a gjson path into a JSON body
	CaptureRegex                           // the first group of a regular expression on the body
	CaptureHeader                          // a response header's first value
	CaptureCookie                          // a cookie any response of the step set (the last one wins)
)

var captureSources = [...]string{CaptureJSON: "json", CaptureRegex: "regex", CaptureHeader: "header", CaptureCookie: "cookie"}

func (s CaptureSource) String() string {
	if int(s) < len(captureSources) && s > 0 {
		return captureSources[s]
	}
	return fmt.Sprintf("CaptureSource(%d)", uint8(s))
}

// HTTPCapture takes a value out of a step's response into the VU's
// variable Name, for later steps' {{Name}}.
type HTTPCapture struct {
	Name   string        `cbor:"1,keyasint"`
	Source CaptureSource `cbor:"2,keyasint"`
	// Expr is the gjson path, the regular expression, the header name or
	// the cookie name.
	Expr string `cbor:"3,keyasint"`
}

// CaptureScope is how long a step's captured values last.
type CaptureScope uint8

// Capture scopes.
const (
	// ScopeIteration: cleared when the VU starts its next iteration, so
	// every iteration logs in afresh (the zero value).
	ScopeIteration CaptureScope = iota
	// ScopeVU: kept for the VU's life, until captured again (a token
	// fetched once per VU).
	ScopeVU
)

// CheckKind is what a check looks at.
type CheckKind uint8

// Check kinds. The zero value is invalid.
const (
	CheckStatus        CheckKind = iota + 1 // the status is one of Statuses
	CheckJSON                               // a gjson path: exists, equals or matches
	CheckBodyContains                       // the body contains Value
	CheckHeader                             // a header: exists or matches
	CheckDurationBelow                      // the response's latency is below Below
)

var checkKinds = [...]string{CheckStatus: "status", CheckJSON: "json", CheckBodyContains: "body_contains",
	CheckHeader: "header", CheckDurationBelow: "duration_below"}

func (k CheckKind) String() string {
	if int(k) < len(checkKinds) && k > 0 {
		return checkKinds[k]
	}
	return fmt.Sprintf("CheckKind(%d)", uint8(k))
}

// CheckOp is how a json or header check compares.
type CheckOp uint8

// Check comparisons.
const (
	OpExists  CheckOp = iota + 1 // the path or header is present
	OpEquals                     // its value is Value (json: as gjson's String renders it)
	OpMatches                    // its value matches the regular expression Value
)

// HTTPCheck is a non-fatal assertion on a step's response: it is counted as
// passed or failed and never changes the request's own outcome.
type HTTPCheck struct {
	Name     string    `cbor:"1,keyasint"`
	Kind     CheckKind `cbor:"2,keyasint"`
	Statuses []int     `cbor:"3,keyasint,omitempty"`
	// Path is the gjson path (json) or the header name (header).
	Path  string  `cbor:"4,keyasint,omitempty"`
	Op    CheckOp `cbor:"5,keyasint,omitempty"`
	Value string  `cbor:"6,keyasint,omitempty"`
	// Below is duration_below's bound.
	Below time.Duration `cbor:"7,keyasint,omitempty"`
}

// parseCaptures reads a step's captures and, with scoped, capture_scope.
func parseCaptures(sf *Fields, st *HTTPStep, scoped bool) {
	items, _ := sf.Objects("captures")
	for _, cf := range items {
		cf.Required("name")
		var c HTTPCapture
		c.Name, _ = cf.String("name")
		var given []string
		for src := CaptureJSON; src <= CaptureCookie; src++ {
			if e, ok := cf.String(src.String()); ok {
				c.Source, c.Expr = src, e
				given = append(given, src.String())
			}
		}
		switch len(given) {
		case 0:
			cf.Problemf("a capture needs one source: json, regex, header or cookie")
		case 1:
		default:
			cf.Problemf("a capture has one source, got %s", strings.Join(given, " and "))
		}
		st.Captures = append(st.Captures, c)
	}
	if !scoped {
		return // capture_scope is then an unknown key, refused by Finish
	}
	if s, ok := sf.String("capture_scope"); ok {
		switch s {
		case "iteration":
			st.CaptureScope = ScopeIteration
		case "vu":
			st.CaptureScope = ScopeVU
		default:
			sf.Errorf("capture_scope", "must be iteration or vu, got %q", truncate(s, 40))
		}
	}
}

// parseChecks reads a step's checks.
func parseChecks(sf *Fields, st *HTTPStep) {
	items, _ := sf.Objects("checks")
	for _, cf := range items {
		cf.Required("name")
		var c HTTPCheck
		c.Name, _ = cf.String("name")
		var kinds []string
		if codes, ok := cf.IntList("status"); ok {
			c.Kind, kinds = CheckStatus, append(kinds, "status")
			for _, code := range codes {
				c.Statuses = append(c.Statuses, int(code))
			}
		}
		if p, ok := cf.String("json"); ok {
			c.Kind, c.Path, kinds = CheckJSON, p, append(kinds, "json")
		}
		if v, ok := cf.String("body_contains"); ok {
			c.Kind, c.Value, kinds = CheckBodyContains, v, append(kinds, "body_contains")
		}
		if h, ok := cf.String("header"); ok {
			c.Kind, c.Path, kinds = CheckHeader, h, append(kinds, "header")
		}
		if d, ok := cf.Duration("duration_below"); ok {
			c.Kind, c.Below, kinds = CheckDurationBelow, d, append(kinds, "duration_below")
		}
		switch len(kinds) {
		case 0:
			cf.Problemf("a check needs one kind: status, json, body_contains, header or duration_below")
		case 1:
		default:
			cf.Problemf("a check has one kind, got %s", strings.Join(kinds, " and "))
		}
		// The comparison of a json or header check.
		var ops []string
		if e, ok := cf.Bool("exists"); ok {
			if !e {
				cf.Errorf("exists", "must be true (a check that something is absent is not supported)")
			}
			c.Op, ops = OpExists, append(ops, "exists")
		}
		if v, ok := cf.String("equals"); ok {
			c.Op, c.Value, ops = OpEquals, v, append(ops, "equals")
		}
		if v, ok := cf.String("matches"); ok {
			c.Op, c.Value, ops = OpMatches, v, append(ops, "matches")
		}
		switch {
		case (c.Kind == CheckJSON || c.Kind == CheckHeader) && len(ops) == 0:
			cf.Problemf("a %s check needs one of exists: true, equals or matches", c.Kind)
		case len(ops) > 1:
			cf.Problemf("a check compares one way, got %s", strings.Join(ops, " and "))
		case len(ops) == 1 && c.Kind != CheckJSON && c.Kind != CheckHeader && c.Kind != 0:
			cf.Errorf(ops[0], "only applies to json and header checks")
		}
		st.Checks = append(st.Checks, c)
	}
}

// isVarName reports whether s can name a captured variable: a letter or
// underscore, then letters, digits, underscores or hyphens, and not a
// template function's name.
func isVarName(s string) bool {
	if s == "" || len(s) > 64 || s == "vu" || s == "iteration" || s == "random_int" || s == "data" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
		if !letter && (i == 0 || !(c >= '0' && c <= '9' || c == '-')) {
			return false
		}
	}
	return true
}

// checkGJSONPath refuses a path gjson would read as nothing at all: empty,
// an empty component, an unbalanced bracket or quote. gjson has no
// validator of its own and answers any string; these are the mistakes that
// would make every capture of a run miss.
func checkGJSONPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("is empty; write a gjson path such as data.token")
	case len(p) > maxFlowExprLen:
		return fmt.Errorf("must be at most %d bytes, got %d", maxFlowExprLen, len(p))
	}
	var stack []byte
	inQuote := false
	prev := byte('.')
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\\':
			i++ // escapes the next byte, whatever it is
			prev = 'x'
			continue
		case inQuote:
			if c == '"' {
				inQuote = false
			}
		case c == '"':
			inQuote = true
		case c == '(' || c == '[' || c == '{':
			stack = append(stack, c)
		case c == ')' || c == ']' || c == '}':
			open := map[byte]byte{')': '(', ']': '[', '}': '{'}[c]
			if len(stack) == 0 || stack[len(stack)-1] != open {
				return fmt.Errorf("path %q: unbalanced %q at byte %d", truncate(p, 80), c, i)
			}
			stack = stack[:len(stack)-1]
		case (c == '.' || c == '|') && len(stack) == 0 && (prev == '.' || prev == '|'):
			return fmt.Errorf("path %q: empty component at byte %d", truncate(p, 80), i)
		}
		prev = c
	}
	switch {
	case inQuote:
		return fmt.Errorf("path %q: unclosed quote", truncate(p, 80))
	case len(stack) > 0:
		return fmt.Errorf("path %q: unclosed %q", truncate(p, 80), stack[len(stack)-1])
	case prev == '.' || prev == '|':
		return fmt.Errorf("path %q ends with %q", truncate(p, 80), prev)
	}
	return nil
}

// compileFlowRegex compiles a capture's or check's regular expression;
// captures need a group to take.
func compileFlowRegex(expr string, needGroup bool) (*regexp.Regexp, error) {
	if len(expr) > maxFlowExprLen {
		return nil, fmt.Errorf("must be at most %d bytes, got %d", maxFlowExprLen, len(expr))
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, fmt.Errorf("is not a regular expression: %w", err)
	}
	if needGroup && re.NumSubexp() < 1 {
		return nil, fmt.Errorf("%q has no group; the capture takes the first group's match, as in 'token=([^&]+)'", truncate(expr, 80))
	}
	return re, nil
}

// validateFlow checks a step's captures and checks. known is every variable
// a step may use, with whether any capture of it is VU-scoped; the caller
// builds it.
func (st *HTTPStep) validateFlow(errs *FieldErrors, path string, proto Protocol) {
	if len(st.Captures) > maxCaptures {
		errs.add(JoinPath(path, "captures"), "must have at most %d captures, got %d", maxCaptures, len(st.Captures))
	}
	for i, c := range st.Captures {
		cp := IndexPath(JoinPath(path, "captures"), i)
		if !isVarName(c.Name) {
			errs.add(JoinPath(cp, "name"), "must be a letter or _ then letters, digits, _ or -, at most 64 bytes, and not vu, iteration, random_int or data; got %q", truncate(c.Name, 40))
		}
		ep := JoinPath(cp, c.Source.String())
		switch c.Source {
		case CaptureJSON:
			if err := checkGJSONPath(c.Expr); err != nil {
				errs.add(ep, "%v", err)
			}
		case CaptureRegex:
			if _, err := compileFlowRegex(c.Expr, true); err != nil {
				errs.add(ep, "%v", err)
			}
		case CaptureHeader:
			if len(c.Expr) > maxHeaderLen || !isToken(c.Expr) {
				errs.add(ep, "is not a valid header name")
			}
		case CaptureCookie:
			if len(c.Expr) > maxHeaderLen || !isToken(c.Expr) {
				errs.add(ep, "is not a valid cookie name")
			}
		default:
			errs.add(cp, "has no known source (json, regex, header or cookie)")
		}
	}
	if st.CaptureScope > ScopeVU {
		errs.add(JoinPath(path, "capture_scope"), "must be iteration or vu")
	}
	if len(st.Checks) > maxChecks {
		errs.add(JoinPath(path, "checks"), "must have at most %d checks, got %d", maxChecks, len(st.Checks))
	}
	names := map[string]int{}
	for i, c := range st.Checks {
		cp := IndexPath(JoinPath(path, "checks"), i)
		if err := CheckName(c.Name); err != nil {
			errs.add(JoinPath(cp, "name"), "%v", err)
		} else if j, dup := names[c.Name]; dup {
			errs.add(JoinPath(cp, "name"), "duplicate check name %q (also checks[%d])", c.Name, j)
		} else {
			names[c.Name] = i
		}
		c.validate(errs, cp, proto)
	}
}

func (c *HTTPCheck) validate(errs *FieldErrors, cp string, proto Protocol) {
	switch c.Kind {
	case CheckStatus:
		if len(c.Statuses) == 0 || len(c.Statuses) > maxExpectStatus {
			errs.add(JoinPath(cp, "status"), "must list between 1 and %d statuses", maxExpectStatus)
		}
		for _, code := range c.Statuses {
			if err := checkStatus(code, proto); err != nil {
				errs.add(JoinPath(cp, "status"), "%v", err)
				break
			}
		}
	case CheckJSON:
		if err := checkGJSONPath(c.Path); err != nil {
			errs.add(JoinPath(cp, "json"), "%v", err)
		}
	case CheckHeader:
		if len(c.Path) > maxHeaderLen || !isToken(c.Path) {
			errs.add(JoinPath(cp, "header"), "is not a valid header name")
		}
		if c.Op == OpEquals {
			errs.add(JoinPath(cp, "equals"), "header checks use exists or matches")
		}
	case CheckBodyContains:
		if c.Value == "" || len(c.Value) > maxExpectBody {
			errs.add(JoinPath(cp, "body_contains"), "must be between 1 and %d bytes", maxExpectBody)
		}
	case CheckDurationBelow:
		if c.Below <= 0 || c.Below > MaxRequestTimeout {
			errs.add(JoinPath(cp, "duration_below"), "must be between 0 and %s, got %s", fmtDuration(MaxRequestTimeout), fmtDuration(c.Below))
		}
	default:
		errs.add(cp, "has no known kind (status, json, body_contains, header or duration_below)")
		return
	}
	if c.Kind == CheckJSON || c.Kind == CheckHeader {
		switch c.Op {
		case OpExists, OpEquals:
		case OpMatches:
			if _, err := compileFlowRegex(c.Value, false); err != nil {
				errs.add(JoinPath(cp, "matches"), "%v", err)
			}
		default:
			errs.add(cp, "needs one of exists: true, equals or matches")
		}
	} else if c.Op != 0 {
		errs.add(cp, "exists, equals and matches only apply to json and header checks")
	}
}

// validateVars checks that every {{name}} a step uses is captured: by an
// earlier step, or by any step with capture_scope: vu (whose value a VU may
// hold from its previous iteration; in its first, the step is skipped).
// Also that no name is captured under both scopes, which would leave its
// lifetime to whichever step ran last.
func (p *HTTPParams) validateVars(errs *FieldErrors) {
	earlier := map[string]bool{}
	fromSetup := map[string]bool{}
	for i, st := range p.Setup {
		p.checkVarsKnown(errs, IndexPath("setup", i), &st, earlier, nil)
		for _, c := range st.Captures {
			earlier[c.Name], fromSetup[c.Name] = true, true
		}
	}
	scope := map[string]CaptureScope{}
	for i, st := range p.Steps {
		for j, c := range st.Captures {
			if s, ok := scope[c.Name]; ok && s != st.CaptureScope {
				errs.add(JoinPath(IndexPath(JoinPath(IndexPath("steps", i), "captures"), j), "name"),
					"%q is captured by another step with a different capture_scope", c.Name)
			}
			if fromSetup[c.Name] {
				errs.add(JoinPath(IndexPath(JoinPath(IndexPath("steps", i), "captures"), j), "name"),
					"%q is captured by a setup step, whose values every VU shares; capture it under another name", c.Name)
			}
			scope[c.Name] = st.CaptureScope
		}
	}
	for i, st := range p.Steps {
		p.checkVarsKnown(errs, IndexPath("steps", i), &st, earlier, scope)
		for _, c := range st.Captures {
			earlier[c.Name] = true
		}
	}
}

// checkVarsKnown checks that every {{name}} st renders is captured by an
// earlier step (earlier) or by a VU-scoped capture of any step (scope).
func (p *HTTPParams) checkVarsKnown(errs *FieldErrors, path string, st *HTTPStep, earlier map[string]bool, scope map[string]CaptureScope) {
	check := func(field, src string) {
		t, err := parseTemplate(src)
		if err != nil {
			return // the step's own check reports it
		}
		for _, name := range t.varNames() {
			if !earlier[name] && scope[name] != ScopeVU {
				known := slices.Sorted(func(yield func(string) bool) {
					for k := range earlier {
						if !yield(k) {
							return
						}
					}
				})
				where := "no earlier step captures it"
				if _, later := scope[name]; later {
					where = "it is only captured by this or a later step (capture_scope: vu keeps a value across iterations)"
				}
				errs.add(JoinPath(path, field), "{{%s}} is not a template function (%s) and %s (captured before this step: [%s])",
					truncate(name, 40), builtinFuncs, where, strings.Join(known, ", "))
			}
		}
	}
	check("url", st.URL)
	check("body", st.Body)
	for k, v := range st.Headers {
		check(JoinPath("headers", k), v)
	}
}

// flowBody is the body a VU keeps for captures and checks, up to
// maxFlowBody; beyond it, bytes are counted (by the countingWriter in
// front) and dropped.
type flowBody struct{ b []byte }

func (f *flowBody) Write(p []byte) (int, error) {
	if room := maxFlowBody - len(f.b); room > 0 {
		f.b = append(f.b, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

// headerField is one response header field, kept for captures and checks.
type headerField struct{ name, value string }

// respHead is what a VU keeps of a response's header: always the Location
// (for redirects) and Set-Cookie values (for the jar and cookie captures);
// every field when the step reads headers. One per VU, reused.
type respHead struct {
	all        bool
	location   string
	setCookies []string
	fields     []headerField
	// onHeader is h.field as a method value, made once so that handing
	// it to the h1 client allocates nothing per request.
	onHeader func(name, value []byte)
}

func newRespHead() *respHead {
	h := &respHead{}
	h.onHeader = h.field
	return h
}

func (h *respHead) reset(all bool) {
	h.all, h.location = all, ""
	h.setCookies = h.setCookies[:0]
	h.fields = h.fields[:0]
}

func (h *respHead) field(name, value []byte) {
	switch {
	case len(name) == 8 && bytes.EqualFold(name, []byte("Location")):
		h.location = string(value)
	case len(name) == 10 && bytes.EqualFold(name, []byte("Set-Cookie")):
		h.setCookies = append(h.setCookies, string(value))
	}
	if h.all {
		h.fields = append(h.fields, headerField{name: string(name), value: string(value)})
	}
}

// fromHTTP fills h from a net/http response's header.
func (h *respHead) fromHTTP(hdr http.Header) {
	h.location = hdr.Get("Location")
	h.setCookies = append(h.setCookies, hdr.Values("Set-Cookie")...)
	if h.all {
		for k, vs := range hdr {
			for _, v := range vs {
				h.fields = append(h.fields, headerField{name: k, value: v})
			}
		}
	}
}

// get returns the first value of a header, ignoring case.
func (h *respHead) get(name string) (string, bool) {
	for _, f := range h.fields {
		if strings.EqualFold(f.name, name) {
			return f.value, true
		}
	}
	return "", false
}

// preparedCapture is a capture ready to run: its variable's slot and, for
// regex captures, the compiled expression.
type preparedCapture struct {
	HTTPCapture
	slot int
	re   *regexp.Regexp
}

// preparedCheck is a check ready to run.
type preparedCheck struct {
	HTTPCheck
	re *regexp.Regexp
}

// flowResponse is what captures and checks read: the last response of a
// step (after redirects), and the cookies any of its responses set.
type flowResponse struct {
	status  int
	latency time.Duration
	head    *respHead
	body    []byte
	// cookies are the Set-Cookie values of every response of the step,
	// oldest first.
	cookies []string
}

// capture returns the captured value, or false when the response does not
// hold it (or holds a value no header could carry).
func (c *preparedCapture) capture(r *flowResponse) (string, bool) {
	var v string
	switch c.Source {
	case CaptureJSON:
		res := gjson.GetBytes(r.body, c.Expr)
		if !res.Exists() {
			return "", false
		}
		v = res.String()
	case CaptureRegex:
		m := c.re.FindSubmatch(r.body)
		if m == nil || m[1] == nil {
			return "", false
		}
		v = string(m[1])
	case CaptureHeader:
		var ok bool
		if v, ok = r.head.get(c.Expr); !ok {
			return "", false
		}
	case CaptureCookie:
		found := false
		for _, line := range r.cookies {
			if ck, err := http.ParseSetCookie(line); err == nil && ck.Name == c.Expr {
				v, found = ck.Value, true
			}
		}
		if !found {
			return "", false
		}
	default:
		return "", false
	}
	// A value goes into URLs, bodies and header values; one that could
	// not be a header value could smuggle a header into a later request.
	if len(v) > maxCaptureValue || !validHeaderValue(v) {
		return "", false
	}
	return v, true
}

// pass judges the check on r.
func (c *preparedCheck) pass(r *flowResponse) bool {
	switch c.Kind {
	case CheckStatus:
		return slices.Contains(c.Statuses, r.status)
	case CheckDurationBelow:
		return r.latency < c.Below
	case CheckBodyContains:
		return bytes.Contains(r.body, []byte(c.Value))
	case CheckJSON:
		res := gjson.GetBytes(r.body, c.Path)
		if !res.Exists() {
			return false
		}
		return c.compare(res.String())
	case CheckHeader:
		v, ok := r.head.get(c.Path)
		return ok && c.compare(v)
	}
	return false
}

func (c *preparedCheck) compare(v string) bool {
	switch c.Op {
	case OpExists:
		return true
	case OpEquals:
		return v == c.Value
	case OpMatches:
		return c.re.MatchString(v)
	}
	return false
}
