package workflow

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
)

const (
	testPassword = "pw-hunter2-7f3a"
	testAPIKey   = "key-91c0-e55d"
)

// setupApp answers POST /login with a token only for the password, and
// /api only for that token as a bearer plus the API key; /fail always
// answers 500.
func setupApp(t *testing.T, loginStatus int) *target {
	return newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/login":
			b, _ := io.ReadAll(r.Body)
			if r.Method != http.MethodPost || string(b) != "pass="+testPassword || loginStatus != http.StatusOK {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{"token": "tok-once"})
		case "/api":
			if r.Header.Get("Authorization") != "Bearer tok-once" || r.Header.Get("X-Api-Key") != testAPIKey {
				w.WriteHeader(http.StatusForbidden)
				return
			}
			io.WriteString(w, "ok")
		case "/fail":
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
}

func setupParams(url string) HTTPParams {
	return HTTPParams{VUs: 4, Iterations: 40,
		Secrets: map[string]string{"PASSWORD": testPassword, "API_KEY": testAPIKey},
		Setup: []HTTPStep{{Name: "login", Method: "POST", URL: url + "/login", Body: "pass={{secret.PASSWORD}}",
			Captures: []HTTPCapture{{Name: "token", Source: CaptureJSON, Expr: "token"}}}},
		Steps: []HTTPStep{{Name: "api", Method: "GET", URL: url + "/api",
			Headers: map[string]string{"Authorization": "Bearer {{token}}", "X-Api-Key": "{{secret.API_KEY}}"}}},
	}
}

// syncBuffer is a log sink VUs may write to at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Setup logs in once; every VU's requests carry the token it captured and
// the API key secret; the setup request is counted under its own step, so
// the target's count equals the engine's.
func TestHTTPSetupRunsOnceAndSharesItsCaptures(t *testing.T) {
	tg := setupApp(t, http.StatusOK)
	p := setupParams(tg.URL)
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	res, err := runHTTP(t, p, Env{})
	if err != nil {
		t.Fatal(err)
	}
	login, api := stepNamed(t, res, "login"), stepNamed(t, res, "api")
	if login.Completed != 1 || login.Failed != 0 || api.Completed != 40 || api.Failed != 0 {
		t.Fatalf("login %d/%d api %d/%d (completed/failed), want 1/0 and 40/0; api errors %v statuses %v",
			login.Completed, login.Failed, api.Completed, api.Failed, api.Errors, api.Statuses)
	}
	if tg.path("/login") != 1 || tg.path("/api") != 40 || tg.total.Load() != res.Completed {
		t.Fatalf("target saw /login %d, /api %d, total %d; engine counted %d", tg.path("/login"), tg.path("/api"), tg.total.Load(), res.Completed)
	}
}

// A setup step that fails fails the run with its reason, and no VU sends
// anything.
func TestHTTPSetupFailureSendsNoLoad(t *testing.T) {
	tg := setupApp(t, http.StatusUnauthorized)
	p := setupParams(tg.URL)
	p.Steps = append(p.Steps, step("free", tg.URL+"/free")) // needs nothing setup captures
	res, err := runHTTP(t, p, Env{})
	if err == nil || !strings.Contains(err.Error(), `setup step "login" failed (status)`) || !strings.Contains(err.Error(), "unexpected status 401") {
		t.Fatalf("err = %v, want the setup step's failure", err)
	}
	if tg.total.Load() != 1 || tg.path("/login") != 1 {
		t.Fatalf("target saw %d requests, /login %d; want the one login and no load", tg.total.Load(), tg.path("/login"))
	}
	if login := stepNamed(t, res, "login"); login.Failed != 1 || login.Errors[ErrorStatus] != 1 {
		t.Fatalf("login failed %d errors %v, want one status failure", login.Failed, login.Errors)
	}
}

// Failures are logged with the request, never with a secret's value: the
// values reach the target and nothing else.
func TestHTTPSecretsAreNotLogged(t *testing.T) {
	tg := setupApp(t, http.StatusOK)
	p := setupParams(tg.URL)
	p.Steps = append(p.Steps, HTTPStep{Name: "fail", Method: "POST", URL: tg.URL + "/fail",
		Body: "key={{secret.API_KEY}}", Headers: map[string]string{"X-Api-Key": "{{secret.API_KEY}}"}})
	var logs syncBuffer
	res, err := runHTTP(t, p, Env{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	if fail := stepNamed(t, res, "fail"); fail.Failed != 40 {
		t.Fatalf("fail step failed %d, want 40", fail.Failed)
	}
	out := logs.String()
	if !strings.Contains(out, "unexpected status 500") {
		t.Fatalf("the failure was not logged:\n%s", out)
	}
	for _, secret := range []string{testPassword, testAPIKey} {
		if strings.Contains(out, secret) {
			t.Errorf("the log shows a secret:\n%s", out)
		}
	}
}

// What only setup steps must satisfy, with the job file's paths.
func TestHTTPSetupValidation(t *testing.T) {
	for _, tt := range []struct {
		name   string
		mutate func(p *HTTPParams)
		want   string
	}{
		{"a load step captures a setup name", func(p *HTTPParams) {
			p.Steps[0].Captures = []HTTPCapture{{Name: "token", Source: CaptureHeader, Expr: "X-T"}}
		}, `steps[0].captures[0].name: "token" is captured by a setup step`},
		{"setup reads data", func(p *HTTPParams) {
			p.Data = &HTTPData{File: "u.csv", CSV: "user\na\n"}
			p.Setup[0].URL += "?u={{data.user}}"
		}, "setup[0].url: setup steps run once, before any VU, and read no data-file row"},
		{"setup uses a later capture", func(p *HTTPParams) {
			p.Setup[0].URL += "?x={{later}}"
			p.Steps[0].Captures = []HTTPCapture{{Name: "later", Source: CaptureHeader, Expr: "X-T"}}
		}, "setup[0].url: {{later}} is not a template function"},
		{"a name in setup and steps", func(p *HTTPParams) { p.Steps[0].Name = "login" },
			`steps[0].name: duplicate step name "login" (also setup[0])`},
		{"a setup secret without a value", func(p *HTTPParams) { delete(p.Secrets, "PASSWORD") },
			"setup[0].body: {{secret.PASSWORD}}: no value was given"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := setupParams("http://127.0.0.1:1")
			tt.mutate(&p)
			err := p.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}
