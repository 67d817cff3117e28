package jobfile

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"tempest/workflow"
)

const withFlow = `name: flow
workflows:
  - name: shop
    type: http
    vus: 2
    iterations: 10
    cookies: false
    redirects: 3
    steps:
      - name: login
        method: POST
        url: "http://127.0.0.1:8080/login"
        captures:
          - {name: token, json: data.token}
          - {name: csrf, regex: 'csrf=([0-9a-f]+)'}
          - {name: rid, header: X-Request-Id}
          - {name: sid, cookie: session}
        capture_scope: vu
        checks:
          - {name: ok, status: [200, 201]}
          - {name: has-token, json: data.token, exists: true}
          - {name: admin, json: user.role, equals: admin}
          - {name: id, json: id, matches: '^[0-9]+$'}
          - {name: welcome, body_contains: Welcome}
          - {name: json, header: Content-Type, matches: json}
          - {name: fast, duration_below: 200ms}
      - name: api
        url: "http://127.0.0.1:8080/api/{{rid}}"
        headers: {Authorization: "Bearer {{token}}"}
    thresholds:
      - "checks > 99%"
      - "check: has-token > 99.9%"
`

func TestParseFlowKeys(t *testing.T) {
	sub := mustParse(t, withFlow)
	p := decodeParams(t, sub.Workflows[0]).(*workflow.HTTPParams)
	if !p.NoCookies || p.Redirects != 3 || p.NoRedirects {
		t.Fatalf("cookies off %v, redirects %d (none %v); want off and 3", p.NoCookies, p.Redirects, p.NoRedirects)
	}
	login := p.Steps[0]
	wantCaptures := []workflow.HTTPCapture{
		{Name: "token", Source: workflow.CaptureJSON, Expr: "data.token"},
		{Name: "csrf", Source: workflow.CaptureRegex, Expr: "csrf=([0-9a-f]+)"},
		{Name: "rid", Source: workflow.CaptureHeader, Expr: "X-Request-Id"},
		{Name: "sid", Source: workflow.CaptureCookie, Expr: "session"},
	}
	if !reflect.DeepEqual(login.Captures, wantCaptures) || login.CaptureScope != workflow.ScopeVU {
		t.Errorf("captures %+v scope %v", login.Captures, login.CaptureScope)
	}
	wantChecks := []workflow.HTTPCheck{
		{Name: "ok", Kind: workflow.CheckStatus, Statuses: []int{200, 201}},
		{Name: "has-token", Kind: workflow.CheckJSON, Path: "data.token", Op: workflow.OpExists},
		{Name: "admin", Kind: workflow.CheckJSON, Path: "user.role", Op: workflow.OpEquals, Value: "admin"},
		{Name: "id", Kind: workflow.CheckJSON, Path: "id", Op: workflow.OpMatches, Value: "^[0-9]+$"},
		{Name: "welcome", Kind: workflow.CheckBodyContains, Value: "Welcome"},
		{Name: "json", Kind: workflow.CheckHeader, Path: "Content-Type", Op: workflow.OpMatches, Value: "json"},
		{Name: "fast", Kind: workflow.CheckDurationBelow, Below: 200 * time.Millisecond},
	}
	if !reflect.DeepEqual(login.Checks, wantChecks) {
		t.Errorf("checks %+v\nwant %+v", login.Checks, wantChecks)
	}
	// redirects: 0 turns following off.
	sub = mustParse(t, strings.Replace(withFlow, "redirects: 3", "redirects: 0", 1))
	if p := decodeParams(t, sub.Workflows[0]).(*workflow.HTTPParams); !p.NoRedirects {
		t.Error("redirects: 0 did not turn redirects off")
	}
}

// Every misuse of the new keys is refused at its line.
func TestParseFlowErrors(t *testing.T) {
	cases := []struct {
		name, old, new string
		want           []string
	}{
		{"bad json path", "json: data.token}", "json: data..token}",
			[]string{`flow.yaml:14: workflows[0].steps[0].captures[0].json: path "data..token": empty component at byte 5`}},
		{"unknown source", "{name: rid, header: X-Request-Id}", "{name: rid, xpath: //id}", []string{
			`flow.yaml:16: workflows[0].steps[0].captures[2]: a capture needs one source: json, regex, header or cookie`,
			`flow.yaml:16: workflows[0].steps[0].captures[2]: unknown key "xpath"`}},
		{"two sources", "{name: sid, cookie: session}", "{name: sid, cookie: session, header: X}",
			[]string{`flow.yaml:17: workflows[0].steps[0].captures[3]: a capture has one source, got header and cookie`}},
		{"regex without a group", "regex: 'csrf=([0-9a-f]+)'", "regex: 'csrf=[0-9a-f]+'",
			[]string{`flow.yaml:15: workflows[0].steps[0].captures[1].regex: "csrf=[0-9a-f]+" has no group; the capture takes the first group's match, as in 'token=([^&]+)'`}},
		{"variable nobody captures", "api/{{rid}}", "api/{{ride}}",
			[]string{`flow.yaml:28: workflows[0].steps[1].url: {{ride}} is not a template function (vu, iteration, random_int, data.<column>) and no earlier step captures it (captured before this step: [csrf, rid, sid, token])`}},
		{"unknown check", "{name: welcome, body_contains: Welcome}", "{name: welcome, body_has: Welcome}", []string{
			`flow.yaml:24: workflows[0].steps[0].checks[4]: a check needs one kind: status, json, body_contains, header or duration_below`,
			`flow.yaml:24: workflows[0].steps[0].checks[4]: unknown key "body_has"`}},
		{"json check without comparison", "{name: admin, json: user.role, equals: admin}", "{name: admin, json: user.role}",
			[]string{`flow.yaml:22: workflows[0].steps[0].checks[2]: a json check needs one of exists: true, equals or matches`}},
		{"check regex", "matches: '^[0-9]+$'", "matches: '^[0-9+$'",
			[]string{"flow.yaml:23: workflows[0].steps[0].checks[3].matches: is not a regular expression: error parsing regexp: missing closing ]: `[0-9+$`"}},
		{"redirects negative", "redirects: 3", "redirects: -1",
			[]string{`flow.yaml:8: workflows[0].redirects: must be between 0 (none followed) and 50, got -1`}},
		{"cookies not a bool", "cookies: false", "cookies: off",
			[]string{`flow.yaml:7: workflows[0].cookies: must be true or false, got "off"`}},
		{"capture scope", "capture_scope: vu", "capture_scope: forever",
			[]string{`flow.yaml:18: workflows[0].steps[0].capture_scope: must be iteration or vu, got "forever"`}},
		{"threshold on a check no step has", `"check: has-token > 99.9%"`, `"check: has-tokn > 99.9%"`,
			[]string{`flow.yaml:32: workflows[0].thresholds[1]: no step has a check named "has-tokn" (checks: ok, has-token, admin, id, welcome, json, fast)`}},
		{"threshold on a check, as a mapping", `"check: has-token > 99.9%"`, `{threshold: "check: nope >= 1%", step: api}`,
			[]string{`flow.yaml:32: workflows[0].thresholds[1].threshold: no step has a check named "nope" (checks: ok, has-token, admin, id, welcome, json, fast)`}},
		{"check threshold bound", `"checks > 99%"`, `"checks > 99"`,
			[]string{`flow.yaml:31: workflows[0].thresholds[0]: bound of checks must be a percentage between 0% and 100% such as "1%", got "99"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.Replace(withFlow, tc.old, tc.new, 1)
			if src == withFlow {
				t.Fatalf("%q is not in the job file", tc.old)
			}
			_, err := Parse([]byte(src), "flow.yaml", workflow.DefaultRegistry())
			if err == nil {
				t.Fatal("parsed without error")
			}
			if got := strings.Split(err.Error(), "\n"); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}
