package jobfile

import (
	"errors"
	"strings"
	"testing"

	"tempest/workflow"
)

const withVars = `name: vars
workflows:
  - name: api
    type: http
    vus: "{{env.VUS}}"
    duration: 1s
    steps:
      - name: login
        method: POST
        url: "http://{{env.HOST}}/login"
        body: 'user={{env.USER_NAME}}&pass={{secret.PASSWORD}}'
        headers: {X-Api-Key: "{{secret.API_KEY}}", X-Run: "run-{{env.RUN}}"}
`

func parseVars(t *testing.T, src string, env, secrets map[string]string) (*workflow.HTTPParams, error) {
	t.Helper()
	lookup := func(m map[string]string) func(string) (string, bool) {
		return func(name string) (string, bool) { v, ok := m[name]; return v, ok }
	}
	sub, err := Parse([]byte(src), "vars.yaml", workflow.DefaultRegistry(), WithEnv(lookup(env)), WithSecrets(lookup(secrets)))
	if err != nil {
		return nil, err
	}
	return decodeParams(t, sub.Workflows[0]).(*workflow.HTTPParams), nil
}

// {{env.NAME}} is filled in everywhere a string is, and a value that is
// one reference alone reads as YAML would read it unquoted (vus: 5).
// {{secret.NAME}} stays a reference in the text; its value travels apart.
func TestEnvAndSecretsFillTheJob(t *testing.T) {
	p, err := parseVars(t, withVars,
		map[string]string{"VUS": "5", "HOST": "127.0.0.1:8080", "USER_NAME": "ann", "RUN": "7"},
		map[string]string{"PASSWORD": "hunter2", "API_KEY": "k-123", "UNUSED": "x"})
	if err != nil {
		t.Fatal(err)
	}
	st := p.Steps[0]
	if p.VUs != 5 || st.URL != "http://127.0.0.1:8080/login" || st.Body != "user=ann&pass={{secret.PASSWORD}}" ||
		st.Headers["X-Run"] != "run-7" || st.Headers["X-Api-Key"] != "{{secret.API_KEY}}" {
		t.Fatalf("vus %d, step %+v", p.VUs, st)
	}
	if len(p.Secrets) != 2 || p.Secrets["PASSWORD"] != "hunter2" || p.Secrets["API_KEY"] != "k-123" {
		t.Fatalf("secrets %v, want the two the steps use", p.Secrets)
	}
}

// A variable or secret without a value is a problem at its line, and the
// message says how to give one; no problem shows a secret's value.
func TestMissingEnvAndSecretsAreRefusedAtTheirLines(t *testing.T) {
	_, err := parseVars(t, withVars, map[string]string{"VUS": "5", "USER_NAME": "ann"}, map[string]string{"API_KEY": "k-123"})
	var jfe *Error
	if !errors.As(err, &jfe) {
		t.Fatalf("err = %v, want problems", err)
	}
	got := jfe.Error()
	for _, want := range []string{
		"vars.yaml:10: workflows[0].steps[0].url: {{env.HOST}}: HOST is not set; set it in the environment of tempest submit or pass --env HOST=VALUE",
		"vars.yaml:11: workflows[0].steps[0].body: {{secret.PASSWORD}}: no value was given; set PASSWORD in the environment of tempest submit or pass --secret PASSWORD=VALUE",
		"vars.yaml:12: workflows[0].steps[0].headers.X-Run: {{env.RUN}}: RUN is not set",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("problems lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "k-123") {
		t.Errorf("a problem shows a secret's value:\n%s", got)
	}
	// Without WithEnv (a server given nothing) every reference is refused.
	if _, err := Parse([]byte(withVars), "vars.yaml", workflow.DefaultRegistry()); err == nil || !strings.Contains(err.Error(), "{{env.VUS}}: VUS is not set") {
		t.Errorf("parse without env: %v", err)
	}
}

// Misused keys and names are refused at their lines: a secret in a URL
// (URLs are logged), a bad variable name, an unclosed reference, a
// secret value that would smuggle a header.
func TestEnvAndSecretMisuseIsRefused(t *testing.T) {
	job := func(url, header string) string {
		return "name: j\nworkflows:\n  - name: w\n    type: http\n    duration: 1s\n    steps:\n      - name: s\n        url: \"" + url +
			"\"\n        headers: {A: \"" + header + "\"}\n"
	}
	secrets := map[string]string{"T": "ok", "NL": "a\r\nX-Evil: 1"}
	for _, tt := range []struct{ url, header, want string }{
		{"http://x/{{secret.T}}", "a", "8: workflows[0].steps[0].url: {{secret.T}} cannot be used in a url"},
		{"http://x/{{env.1A}}", "a", "8: workflows[0].steps[0].url: {{env.1A}}: an environment variable's name is letters"},
		{"http://x/{{env.A", "a", "8: workflows[0].steps[0].url: unclosed {{env."},
		{"http://x/", "{{secret.NL}}", "9: workflows[0].steps[0].headers.A: {{secret.NL}}: the value is not a valid header value"},
		{"http://x/", "{{secret.}}", "9: workflows[0].steps[0].headers.A: template at byte 0: {{secret.}}: a secret's name is letters"},
	} {
		_, err := parseVars(t, job(tt.url, tt.header), map[string]string{"A": "1"}, secrets)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("url %q header %q: err = %v, want %q", tt.url, tt.header, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "X-Evil") {
			t.Errorf("a problem shows a secret's value: %v", err)
		}
	}
}
