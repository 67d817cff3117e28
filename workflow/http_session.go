package workflow

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"

	"golang.org/x/net/publicsuffix"
)

// vuFlow is what a VU carries from one request to the next: its captured
// values, its cookie jar, and the parts of a response captures, checks,
// cookies and redirects read. Only the VU's goroutine touches it.
//
// It costs an idle VU little: the captured values are made on its first
// iteration of a workflow that captures, the jar on the first Set-Cookie of
// an iteration, the response header on the first request that needs one,
// and the body buffer only for steps whose captures or checks read a body.
type vuFlow struct {
	vars *vuVars // nil until the VU runs a workflow that captures
	jar  *cookiejar.Jar
	head *respHead
	kept *keptResponse // nil until a step reads a body or a cookie
	// rq is the request in flight, kept here so that handing it to the
	// sender (an interface) allocates nothing per request.
	rq hopRequest
}

// vuVars are a VU's captured values, by slot.
type vuVars struct {
	values []string // "" when not set
	have   []bool
}

// keptResponse is what a VU keeps of a step's responses for captures and
// checks that read more than the header.
type keptResponse struct {
	body flowBody
	// cookies are the Set-Cookie lines of the step in flight, for cookie
	// captures.
	cookies []string
}

// startIteration forgets the iteration-scoped captured values and the
// cookies: every iteration is a new visit, as in k6, which also empties a
// VU's jar between iterations. Values captured with capture_scope: vu stay,
// and so do setup's, which seed holds (nil: none) and which the VU's first
// iteration starts with.
// It returns the values for the iteration's templates (nil when the
// workflow captures nothing).
func (f *vuFlow) startIteration(slotVU []bool, seed *vuVars) []string {
	f.jar = nil
	if len(slotVU) == 0 {
		return nil
	}
	if f.vars == nil {
		f.vars = &vuVars{values: make([]string, len(slotVU)), have: make([]bool, len(slotVU))}
		if seed != nil { // the values setup steps captured, which last the run
			copy(f.vars.values, seed.values)
			copy(f.vars.have, seed.have)
		}
	}
	for s, keep := range slotVU {
		if !keep {
			f.vars.values[s], f.vars.have[s] = "", false
		}
	}
	return f.vars.values
}

// missing returns a slot of needs that holds no captured value, if any.
func (f *vuFlow) missing(needs []int) (int, bool) {
	for _, s := range needs {
		if !f.vars.have[s] {
			return s, false
		}
	}
	return 0, true
}

func (f *vuFlow) set(slot int, v string) {
	f.vars.values[slot], f.vars.have[slot] = v, true
}

func (f *vuFlow) keep() *keptResponse {
	if f.kept == nil {
		f.kept = &keptResponse{}
	}
	return f.kept
}

func (f *vuFlow) respHead() *respHead {
	if f.head == nil {
		f.head = newRespHead()
	}
	return f.head
}

// storeCookies puts the cookies a response to u set into the jar, making
// the jar on the iteration's first. The jar applies RFC 6265: domain and
// path matching, expiry (Max-Age and Expires), Secure cookies only over
// https, and no cookie for a public suffix (co.uk) by the public-suffix
// list, so one target cannot set cookies for another.
func (f *vuFlow) storeCookies(u *url.URL, lines []string) {
	cookies := make([]*http.Cookie, 0, len(lines))
	for _, line := range lines {
		if c, err := http.ParseSetCookie(line); err == nil {
			cookies = append(cookies, c)
		}
	}
	if len(cookies) == 0 {
		return
	}
	if f.jar == nil {
		// cookiejar.New fails only on options it does not have.
		f.jar, _ = cookiejar.New(&cookiejar.Options{PublicSuffixList: publicsuffix.List})
	}
	f.jar.SetCookies(u, cookies)
}

// cookieHeader is the Cookie header value for cookies ("" for none).
func cookieHeader(cookies []*http.Cookie) string {
	switch len(cookies) {
	case 0:
		return ""
	case 1:
		return cookies[0].Name + "=" + cookies[0].Value
	}
	var b strings.Builder
	for i, c := range cookies {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(c.Name)
		b.WriteByte('=')
		b.WriteString(c.Value)
	}
	return b.String()
}

// hopRequest is one request of a step: the step's own, or a redirect it
// follows.
type hopRequest struct {
	method string
	url    string // as rendered or resolved
	body   string
	// first: the step's own request, whose static target and headers a
	// sender may have prepared.
	first bool
	// crossHost: a redirect took the step to another host than its own,
	// so the step's Authorization and Cookie headers are not sent there
	// (as browsers and net/http do).
	crossHost  bool
	originHost string
	// cookie is the jar's Cookie header for url ("" for none).
	cookie string
	// head receives the response's header fields (nil: not needed).
	head *respHead
}

// isRedirect reports whether status is one a client follows (RFC 9110
// §15.4): not 300 (a choice for the user), not 304 (not a redirect at all).
func isRedirect(status int) bool {
	switch status {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// errBadLocation is a Location that cannot be followed.
var errBadLocation = errors.New("redirect to an unusable Location")

// redirectTarget resolves a Location against the URL it answered.
func redirectTarget(base *url.URL, location string) (*url.URL, error) {
	if base == nil {
		return nil, errBadLocation
	}
	u, err := base.Parse(location)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", errBadLocation, truncate(location, 80), err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w %q: not an http:// or https:// URL", errBadLocation, truncate(location, 80))
	}
	u.Fragment, u.RawFragment = "", ""
	return u, nil
}

// follow makes rq the request that follows a redirect with status to next,
// by RFC 9110's method rules as browsers apply them: 303 turns any method
// but HEAD into a GET without a body; 301 and 302 turn a POST into a GET
// (RFC 9110 §15.4.2-3 allow it, and every browser does it); 307 and 308
// repeat the method and body. origin is the step's own URL, parsed (nil
// when templated).
func (rq *hopRequest) follow(status int, next *url.URL, origin *url.URL) {
	switch {
	case status == http.StatusSeeOther && rq.method != http.MethodHead,
		(status == http.StatusMovedPermanently || status == http.StatusFound) && rq.method == http.MethodPost:
		rq.method, rq.body = http.MethodGet, ""
	}
	if rq.first {
		if origin == nil {
			origin, _ = url.Parse(rq.url) // it was sent, so it parses
		}
		if origin != nil {
			rq.originHost = origin.Host
		}
	}
	rq.crossHost = !strings.EqualFold(next.Host, rq.originHost)
	rq.first = false
	rq.url = next.String()
}
