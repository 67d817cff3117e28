package workflow

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"tempest/wire"
)

// loginApp is a small application a flow logs in to: POST /login answers
// 302 to /home with a session cookie; /home answers 200 only with it; /token
// answers a JSON token (and an X-Request-Id header and a csrf in HTML);
// /api answers 200 only with that token as a bearer.
func loginApp(t *testing.T) *target {
	var n atomic.Int64
	return newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/login":
			if r.Method != http.MethodPost {
				w.WriteHeader(http.StatusMethodNotAllowed)
				return
			}
			http.SetCookie(w, &http.Cookie{Name: "session", Value: "s3cret", Path: "/"})
			http.Redirect(w, r, "/home", http.StatusFound)
		case "/home":
			if c, err := r.Cookie("session"); err != nil || c.Value != "s3cret" {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			io.WriteString(w, `<input name="csrf" value="c-42">`)
		case "/token":
			id := n.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Request-Id", fmt.Sprint("r", id))
			json.NewEncoder(w).Encode(map[string]any{"data": map[string]any{"token": fmt.Sprint("tok", id)}, "n": id})
		case "/api":
			if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer tok") {
				w.WriteHeader(http.StatusForbidden)
				return
			}
			io.WriteString(w, r.Header.Get("Authorization")+" "+r.Header.Get("X-Csrf")+" "+r.URL.Query().Get("rid"))
		}
	})
}

func loginFlow(url string) []HTTPStep {
	return []HTTPStep{
		{Name: "login", Method: "POST", URL: url + "/login", Body: "user=a",
			Captures: []HTTPCapture{{Name: "csrf", Source: CaptureRegex, Expr: `name="csrf" value="([^"]+)"`},
				{Name: "sid", Source: CaptureCookie, Expr: "session"}},
			Checks: []HTTPCheck{{Name: "home", Kind: CheckStatus, Statuses: []int{200}}}},
		{Name: "token", Method: "GET", URL: url + "/token",
			Captures: []HTTPCapture{{Name: "token", Source: CaptureJSON, Expr: "data.token"},
				{Name: "rid", Source: CaptureHeader, Expr: "X-Request-Id"}},
			Checks: []HTTPCheck{
				{Name: "has-token", Kind: CheckJSON, Path: "data.token", Op: OpExists},
				{Name: "json", Kind: CheckHeader, Path: "Content-Type", Op: OpMatches, Value: "^application/json"},
				{Name: "one-in-ten", Kind: CheckJSON, Path: "n", Op: OpMatches, Value: `[^0]$`},
			}},
		{Name: "api", Method: "GET", URL: url + "/api?rid={{rid}}",
			Headers: map[string]string{"Authorization": "Bearer {{token}}", "X-Csrf": "{{csrf}}"},
			Checks: []HTTPCheck{{Name: "echo", Kind: CheckBodyContains, Value: "Bearer tok"},
				{Name: "fast", Kind: CheckDurationBelow, Below: time.Minute}}},
	}
}

func stepNamed(t *testing.T, res Result, name string) StepSnapshot {
	t.Helper()
	for _, st := range res.Steps {
		if st.Name == name {
			return st
		}
	}
	t.Fatalf("no step %q", name)
	return StepSnapshot{}
}

func checkCounts(st StepSnapshot) map[string][2]int64 {
	out := map[string][2]int64{}
	for _, c := range st.Checks {
		out[c.Name] = [2]int64{c.Passed, c.Failed}
	}
	return out
}

// The whole flow, over every protocol (http1's lean client, net/http's h2
// and h2c, quic-go's h3): the redirect is followed
// with the cookie the 302 set, the captured values reach the later step's
// URL and headers, every hop is counted under its step, and the checks'
// counts are exact (the target's n ends in 0 once in ten).
func TestHTTPLoginFlow(t *testing.T) {
	for _, proto := range []Protocol{ProtocolHTTP1, ProtocolH2, ProtocolH2C, ProtocolH3} {
		t.Run(proto.String(), func(t *testing.T) {
			tg := loginApp(t) // counts by path whichever server it is mounted on
			url := tg.URL
			switch proto {
			case ProtocolH2:
				url = newTLSTarget(t, tg.Config.Handler, true).URL
			case ProtocolH2C:
				h2c := newH2CTarget(t, newProtoTarget())
				h2c.Config.Handler = tg.Config.Handler
				url = h2c.URL
			case ProtocolH3:
				url = newH3TargetFor(t, tg.Config.Handler).URL
			}
			const iters = 100
			p := HTTPParams{VUs: 4, Iterations: iters, Protocol: proto, InsecureSkipVerify: proto == ProtocolH2 || proto == ProtocolH3,
				Steps: loginFlow(url)}
			res, err := runHTTP(t, p, Env{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Failed != 0 {
				for _, st := range res.Steps {
					t.Logf("%s: %+v", st.Name, st.Errors)
				}
				t.Fatalf("failed %d, want 0", res.Failed)
			}
			login := stepNamed(t, res, "login")
			// Each login is two requests: the POST (302) and the GET it
			// was redirected to (200).
			if login.Completed != 2*iters || login.Statuses[302] != iters || login.Statuses[200] != iters || login.Latency.Count() != 2*iters {
				t.Fatalf("login: completed %d statuses %v latencies %d, want %d of each of 302 and 200",
					login.Completed, login.Statuses, login.Latency.Count(), iters)
			}
			if got := tg.path("/login") + tg.path("/home") + tg.path("/token") + tg.path("/api"); got != res.Completed {
				t.Fatalf("target saw %d requests, engine counted %d", got, res.Completed)
			}
			if tg.path("/home") != iters || tg.path("/api") != iters {
				t.Fatalf("target saw /home %d, /api %d, want %d", tg.path("/home"), tg.path("/api"), iters)
			}
			want := map[string]map[string][2]int64{
				"login": {"home": {iters, 0}},
				"token": {"has-token": {iters, 0}, "json": {iters, 0}, "one-in-ten": {iters - iters/10, iters / 10}},
				"api":   {"echo": {iters, 0}, "fast": {iters, 0}},
			}
			for step, w := range want {
				if got := checkCounts(stepNamed(t, res, step)); fmt.Sprint(got) != fmt.Sprint(w) {
					t.Errorf("step %s checks %v, want %v", step, got, w)
				}
			}
		})
	}
}

// Without the jar, /home refuses the redirected GET: the flow's cookie came
// from the jar and nothing else.
func TestHTTPCookiesOff(t *testing.T) {
	tg := loginApp(t)
	p := HTTPParams{VUs: 2, Iterations: 10, NoCookies: true, Steps: loginFlow(tg.URL)[:1]}
	res, err := runHTTP(t, p, Env{})
	if err != nil {
		t.Fatal(err)
	}
	login := stepNamed(t, res, "login")
	if login.Statuses[401] != 10 || login.Errors[ErrorStatus] != 10 {
		t.Fatalf("statuses %v errors %v, want ten 401s failed as status", login.Statuses, login.Errors)
	}
	if got := checkCounts(login)["home"]; got != [2]int64{0, 10} {
		t.Fatalf("check home %v, want 0 passed 10 failed", got)
	}
}

// A capture that finds nothing fails its step as class capture, and a step
// that needs the value is skipped and counted, never sent.
func TestHTTPCaptureMissSkipsDependents(t *testing.T) {
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"other": 1}`) })
	p := HTTPParams{VUs: 2, Iterations: 20, Steps: []HTTPStep{
		{Name: "get", URL: tg.URL + "/get", Captures: []HTTPCapture{{Name: "token", Source: CaptureJSON, Expr: "data.token"}}},
		{Name: "use", URL: tg.URL + "/use/{{token}}"},
		{Name: "free", URL: tg.URL + "/free"},
	}}
	res, err := runHTTP(t, p, Env{})
	if err != nil {
		t.Fatal(err)
	}
	get, use, free := stepNamed(t, res, "get"), stepNamed(t, res, "use"), stepNamed(t, res, "free")
	if get.Failed != 20 || get.Errors[ErrorCapture] != 20 {
		t.Errorf("get: failed %d errors %v, want 20 of class capture", get.Failed, get.Errors)
	}
	if use.Failed != 20 || use.Errors[ErrorSkipped] != 20 || use.Latency.Count() != 0 {
		t.Errorf("use: failed %d errors %v latencies %d, want 20 skipped, none timed", use.Failed, use.Errors, use.Latency.Count())
	}
	if free.Completed != 20 {
		t.Errorf("free: completed %d, want 20 (a skip does not end the iteration)", free.Completed)
	}
	if n := tg.total.Load(); n != 40 {
		t.Errorf("target saw %d requests, want 40: a skipped step must not be sent", n)
	}
}

// Captured values last the iteration unless capture_scope: vu: a step that
// captures only in a VU's first iteration feeds its later ones under vu
// scope, and not under iteration scope.
func TestHTTPCaptureScope(t *testing.T) {
	for _, scope := range []CaptureScope{ScopeIteration, ScopeVU} {
		tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/once" && r.URL.Query().Get("i") == "0" {
				io.WriteString(w, "id=7;")
			}
		})
		p := HTTPParams{VUs: 1, Iterations: 5, Steps: []HTTPStep{
			{Name: "once", URL: tg.URL + "/once?i={{iteration}}", CaptureScope: scope,
				Captures: []HTTPCapture{{Name: "id", Source: CaptureRegex, Expr: `id=(\d+);`}}},
			{Name: "use", URL: tg.URL + "/use/{{id}}"},
		}}
		res, err := runHTTP(t, p, Env{})
		if err != nil {
			t.Fatal(err)
		}
		use := stepNamed(t, res, "use")
		want := map[CaptureScope]int64{ScopeIteration: 1, ScopeVU: 5}[scope]
		if use.Completed != want || tg.path("/use/7") != want {
			t.Errorf("scope %d: use completed %d, target saw %d, want %d", scope, use.Completed, tg.path("/use/7"), want)
		}
	}
}

// Redirects: every hop is a request of its step; 303 and a POST's 302 turn
// into GET without a body, 307 and 308 keep both; a loop stops at the limit
// with class redirects, the target having seen exactly limit+1 requests.
func TestHTTPRedirects(t *testing.T) {
	var seen atomic.Value
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		case "/end":
			seen.Store(r.Method + " " + string(b))
		default: // /301, /302, ...
			code := 0
			fmt.Sscan(strings.TrimPrefix(r.URL.Path, "/"), &code)
			http.Redirect(w, r, "/end", code)
		}
	})
	for _, tc := range []struct {
		code   int
		method string
		want   string
	}{
		{301, "POST", "GET "}, {302, "POST", "GET "}, {303, "PUT", "GET "}, {302, "PUT", "PUT x"},
		{307, "POST", "POST x"}, {308, "PATCH", "PATCH x"},
	} {
		p := HTTPParams{VUs: 1, Iterations: 1, Steps: []HTTPStep{{Name: "s", Method: tc.method, URL: fmt.Sprint(tg.URL, "/", tc.code), Body: "x"}}}
		res, err := runHTTP(t, p, Env{})
		if err != nil {
			t.Fatal(err)
		}
		st := res.Steps[0]
		if got := seen.Load(); got != tc.want || st.Completed != 2 || st.Statuses[tc.code] != 1 || st.Statuses[200] != 1 {
			t.Errorf("%s then %d: target got %q (want %q); completed %d statuses %v", tc.method, tc.code, got, tc.want, st.Completed, st.Statuses)
		}
	}

	before := tg.path("/loop")
	p := HTTPParams{VUs: 1, Iterations: 3, Redirects: 4, Steps: []HTTPStep{step("loop", tg.URL+"/loop")}}
	res, err := runHTTP(t, p, Env{})
	if err != nil {
		t.Fatal(err)
	}
	st := res.Steps[0]
	if st.Completed != 3*4 || st.Failed != 3 || st.Errors[ErrorRedirects] != 3 || tg.path("/loop")-before != 3*5 {
		t.Fatalf("loop: completed %d failed %d errors %v, target saw %d; want 12 hops, 3 failed as redirects, 15 requests",
			st.Completed, st.Failed, st.Errors, tg.path("/loop")-before)
	}
}

// The cookie jar follows RFC 6265: a cookie for another path is not sent,
// an expired one is dropped, and one whose Domain is a public suffix is
// refused. A Secure one goes over http here only because the target is on
// loopback, which the jar (like browsers) counts as a secure origin.
func TestHTTPCookieJarRules(t *testing.T) {
	var got atomic.Value
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/set":
			for _, c := range []string{"a=1; Path=/", "p=2; Path=/other", "gone=3; Max-Age=0", "sec=4; Secure",
				"psl=5; Domain=co.uk", "late=6; Expires=Thu, 01 Jan 1970 00:00:00 GMT"} {
				w.Header().Add("Set-Cookie", c)
			}
		case "/read":
			got.Store(r.Header.Get("Cookie"))
		}
	})
	p := HTTPParams{VUs: 1, Iterations: 1, Steps: []HTTPStep{step("set", tg.URL+"/set"), step("read", tg.URL+"/read")}}
	if _, err := runHTTP(t, p, Env{}); err != nil {
		t.Fatal(err)
	}
	if c := got.Load(); c != "a=1; sec=4" {
		t.Fatalf("Cookie %q, want a=1; sec=4", c)
	}
}

func TestFlowValidate(t *testing.T) {
	base := func() HTTPParams {
		return HTTPParams{VUs: 1, Iterations: 1, Steps: []HTTPStep{
			{Name: "a", URL: "http://x/a", Captures: []HTTPCapture{{Name: "tok", Source: CaptureJSON, Expr: "data.token"}}},
			{Name: "b", URL: "http://x/b/{{tok}}"},
		}}
	}
	cases := []struct {
		name   string
		mutate func(p *HTTPParams)
		want   string
	}{
		{"valid", func(*HTTPParams) {}, ""},
		{"empty path component", func(p *HTTPParams) { p.Steps[0].Captures[0].Expr = "data..token" }, "steps[0].captures[0].json: path \"data..token\": empty component"},
		{"unbalanced query", func(p *HTTPParams) { p.Steps[0].Captures[0].Expr = `items.#(id=="x"` }, "unclosed"},
		{"regex without group", func(p *HTTPParams) {
			p.Steps[0].Captures[0] = HTTPCapture{Name: "tok", Source: CaptureRegex, Expr: "abc"}
		}, "has no group"},
		{"bad regex", func(p *HTTPParams) {
			p.Steps[0].Captures[0] = HTTPCapture{Name: "tok", Source: CaptureRegex, Expr: "(a"}
		}, "not a regular expression"},
		{"no source", func(p *HTTPParams) { p.Steps[0].Captures[0].Source = 0 }, "steps[0].captures[0]: has no known source"},
		{"reserved name", func(p *HTTPParams) { p.Steps[0].Captures[0].Name = "vu" }, "steps[0].captures[0].name"},
		{"used before captured", func(p *HTTPParams) { p.Steps[0], p.Steps[1] = p.Steps[1], p.Steps[0] }, "steps[0].url: {{tok}} is not a template function"},
		{"vu scope may come later", func(p *HTTPParams) {
			p.Steps[0], p.Steps[1] = p.Steps[1], p.Steps[0]
			p.Steps[1].CaptureScope = ScopeVU
		}, ""},
		{"scopes disagree", func(p *HTTPParams) {
			p.Steps[1].Captures = []HTTPCapture{{Name: "tok", Source: CaptureHeader, Expr: "X-T"}}
			p.Steps[1].CaptureScope = ScopeVU
		}, "different capture_scope"},
		{"check without kind", func(p *HTTPParams) { p.Steps[0].Checks = []HTTPCheck{{Name: "c"}} }, "steps[0].checks[0]: has no known kind"},
		{"json check without op", func(p *HTTPParams) { p.Steps[0].Checks = []HTTPCheck{{Name: "c", Kind: CheckJSON, Path: "a"}} }, "needs one of exists"},
		{"duplicate check", func(p *HTTPParams) {
			p.Steps[0].Checks = []HTTPCheck{{Name: "c", Kind: CheckStatus, Statuses: []int{200}}, {Name: "c", Kind: CheckStatus, Statuses: []int{201}}}
		}, "duplicate check name"},
		{"bad status", func(p *HTTPParams) {
			p.Steps[0].Checks = []HTTPCheck{{Name: "c", Kind: CheckStatus, Statuses: []int{99}}}
		}, "between 100 and 599"},
		{"redirects negative", func(p *HTTPParams) { p.Redirects = -1 }, "redirects: must be between 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := base()
			tc.mutate(&p)
			err := p.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// Checks merge by name, exactly, in first-seen order: across shards or
// datacenters a check's counts add, and a check only one part has is kept.
func TestMergeStepStatsChecks(t *testing.T) {
	a := []wire.StepStats{{StepName: "s", Checks: []wire.CheckStats{{Name: "ok", Passed: 9, Failed: 1}, {Name: "fast", Passed: 3}}}}
	b := []wire.StepStats{{StepName: "s", Checks: []wire.CheckStats{{Name: "fast", Passed: 1, Failed: 2}, {Name: "new", Failed: 4}}}}
	m, err := MergeStepStats(a, b)
	if err != nil {
		t.Fatal(err)
	}
	want := []wire.CheckStats{{Name: "ok", Passed: 9, Failed: 1}, {Name: "fast", Passed: 4, Failed: 2}, {Name: "new", Failed: 4}}
	if !reflect.DeepEqual(m[0].Checks, want) {
		t.Fatalf("merged checks %+v, want %+v", m[0].Checks, want)
	}
	bad := []wire.StepStats{{StepName: "s", Checks: []wire.CheckStats{{Name: "ok", Passed: -1}}}}
	if _, err := MergeStepStats(a, bad); err == nil {
		t.Fatal("a negative check count merged")
	}
}

// A redirect to another host does not carry the step's Authorization or
// Cookie headers there, over either client; a redirect within the host
// does.
func TestHTTPRedirectDropsCredentialsAcrossHosts(t *testing.T) {
	for _, proto := range []Protocol{ProtocolHTTP1, ProtocolH2C} {
		t.Run(proto.String(), func(t *testing.T) {
			var got atomic.Value
			record := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got.Store(r.Header.Get("Authorization") + "|" + r.Header.Get("Cookie") + "|" + r.Header.Get("X-Keep"))
			})
			other := newH2CTarget(t, newProtoTarget())
			other.Config.Handler = record
			home := newH2CTarget(t, newProtoTarget())
			if proto == ProtocolHTTP1 {
				other = newTarget(t, record).Server
				home = newTarget(t, nil).Server
			}
			home.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/away":
					http.Redirect(w, r, other.URL+"/x", http.StatusFound)
				case "/here":
					http.Redirect(w, r, "/end", http.StatusFound)
				default:
					record(w, r)
				}
			})
			hdr := map[string]string{"Authorization": "Bearer s", "Cookie": "c=1", "X-Keep": "k"}
			for path, want := range map[string]string{"/away": "||k", "/here": "Bearer s|c=1|k"} {
				p := HTTPParams{VUs: 1, Iterations: 1, Protocol: proto, Steps: []HTTPStep{{Name: "s", URL: home.URL + path, Headers: hdr}}}
				if _, err := runHTTP(t, p, Env{}); err != nil {
					t.Fatal(err)
				}
				if g := got.Load(); g != want {
					t.Errorf("%s: the redirected request had %q, want %q", path, g, want)
				}
			}
		})
	}
}

// The jar sends a Secure cookie only over https to a host that is not
// loopback, and forgets every cookie when the VU starts an iteration.
func TestVUFlowJar(t *testing.T) {
	var f vuFlow
	u, _ := url.Parse("http://shop.example/")
	s, _ := url.Parse("https://shop.example/")
	f.storeCookies(u, []string{"plain=1", "sec=2; Secure", "bad"})
	if got := cookieHeader(f.jar.Cookies(u)); got != "plain=1" {
		t.Errorf("over http: %q, want plain=1", got)
	}
	f.storeCookies(s, []string{"sec=2; Secure"})
	if got := cookieHeader(f.jar.Cookies(s)); got != "plain=1; sec=2" {
		t.Errorf("over https: %q, want plain=1; sec=2", got)
	}
	f.startIteration(nil, nil)
	if f.jar != nil {
		t.Error("the jar outlived the iteration")
	}
}
