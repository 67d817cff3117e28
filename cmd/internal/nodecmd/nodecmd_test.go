package nodecmd

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/security"
	"tempest/security/securitytest"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

type testConfig struct {
	Name    string        `yaml:"name"`
	Cores   int           `yaml:"cores"`
	Timeout time.Duration `yaml:"timeout"`
}

func TestReadConfigFile(t *testing.T) {
	defaults := testConfig{Name: "default", Cores: 4, Timeout: time.Second}
	for _, tc := range []struct {
		name    string
		content string // "" with missing: no file at all
		missing bool
		want    testConfig
		wantErr string
	}{
		{name: "over defaults", content: "name: n1\ntimeout: 3s\n", want: testConfig{Name: "n1", Cores: 4, Timeout: 3 * time.Second}},
		{name: "empty file", content: "", want: defaults},
		{name: "comments only", content: "# nothing set\n", want: defaults},
		{name: "unknown key", content: "name: n1\ncorez: 3\n", wantErr: "corez"},
		{name: "bad value", content: "cores: many\n", wantErr: "cores.yaml"},
		{name: "missing file", missing: true, wantErr: "config:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "absent.yaml")
			if !tc.missing {
				path = testutil.WriteFile(t, "cores.yaml", tc.content)
			}
			cfg := defaults
			err := ReadConfigFile(path, &cfg)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to mention %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || cfg != tc.want {
				t.Fatalf("ReadConfigFile = %+v, %v; want %+v", cfg, err, tc.want)
			}
		})
	}
}

func TestSplitList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{" , ,", nil},
		{"a", []string{"a"}},
		{" a:1, b:2 ,", []string{"a:1", "b:2"}},
	} {
		if got := SplitList(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("SplitList(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestNewLogger(t *testing.T) {
	for _, tc := range []struct {
		format, level string
		want          string // in the output of a Warn, or in the error
		wantErr       bool
	}{
		{format: "text", level: "info", want: "msg=hello"},
		{format: "json", level: "debug", want: `"msg":"hello"`},
		{format: "text", level: "error", want: ""}, // the warning is filtered out
		{format: "xml", level: "info", want: "--log-format", wantErr: true},
		{format: "text", level: "loud", want: "--log-level", wantErr: true},
	} {
		t.Run(tc.format+"/"+tc.level, func(t *testing.T) {
			var buf bytes.Buffer
			logger, err := NewLogger(tc.format, tc.level, &buf)
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v, want it to mention %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			logger.Warn("hello")
			if got := buf.String(); (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("logged %q, want %q", got, tc.want)
			}
		})
	}
}

func TestKeyringFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		wantErr string // "" for success
	}{
		{"good", map[string]string{"AUTH_SECRET": securitytest.Secret(t)}, ""},
		{"rotation", map[string]string{"AUTH_SECRET": securitytest.Secret(t), "AUTH_SECRET_PREVIOUS": securitytest.Secret(t)}, ""},
		{"missing", nil, "AUTH_SECRET is not set"},
		{"short", map[string]string{"AUTH_SECRET": "hunter2"}, "AUTH_SECRET"},
		{"sample", map[string]string{"AUTH_SECRET": security.SampleSecret}, "AUTH_SECRET"},
		{"weak previous", map[string]string{"AUTH_SECRET": securitytest.Secret(t), "AUTH_SECRET_PREVIOUS": strings.Repeat("a", 40)}, "AUTH_SECRET_PREVIOUS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := KeyringFromEnv(func(key string) string { return tc.env[key] })
			if tc.wantErr == "" {
				if err != nil || k == nil {
					t.Fatalf("KeyringFromEnv = %v, %v", k, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.wantErr)
			}
		})
	}
}

func TestSecrets(t *testing.T) {
	env := map[string]string{"AUTH_SECRET": "env-current", "AUTH_SECRET_PREVIOUS": "env-previous"}
	for _, tc := range []struct {
		name          string
		file          string // contents of --secret-file; "" for none
		env           map[string]string
		cur, prev     string
		wantErr       string
		mustNotExpose string
	}{
		{name: "from env", env: env, cur: "env-current", prev: "env-previous"},
		{name: "env without previous", env: map[string]string{"AUTH_SECRET": "c"}, cur: "c"},
		{name: "env without current", env: nil, wantErr: "AUTH_SECRET is not set"},
		// The file wins over the environment, which a running process
		// cannot see change.
		{name: "from file", file: "AUTH_SECRET=file-current\nAUTH_SECRET_PREVIOUS='file-previous'\n", env: env, cur: "file-current", prev: "file-previous"},
		{name: "file without previous", file: "export AUTH_SECRET=\"c\"\n", env: env, cur: "c"},
		{name: "file without current", file: "AUTH_SECRET_PREVIOUS=p\n", env: env, wantErr: "AUTH_SECRET is not set"},
		{name: "bad file line", file: "AUTH_SECRET=fine\nthe-new-secret\n", env: env, wantErr: "secret.env:2", mustNotExpose: "the-new-secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := ""
			if tc.file != "" {
				path = testutil.WriteFile(t, "secret.env", tc.file)
			}
			cur, prev, err := Secrets(path, func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to mention %q", err, tc.wantErr)
				}
				if tc.mustNotExpose != "" && strings.Contains(err.Error(), tc.mustNotExpose) {
					t.Fatalf("err = %v: it must name the line, never echo it", err)
				}
				return
			}
			if err != nil || cur != tc.cur || prev != tc.prev {
				t.Fatalf("Secrets = %q, %q, %v; want %q, %q", cur, prev, err, tc.cur, tc.prev)
			}
		})
	}
	if _, _, err := Secrets(filepath.Join(t.TempDir(), "absent.env"), func(string) string { return "x" }); err == nil || !strings.Contains(err.Error(), "secret file") {
		t.Fatalf("missing file: err = %v", err)
	}
}

func TestParseEnv(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want map[string]string
	}{
		{"empty", "", map[string]string{}},
		{"comments and blanks", "# rotation pass 1\n\n   \n  # indented\n", map[string]string{}},
		{"plain", "AUTH_SECRET=abc\n", map[string]string{"AUTH_SECRET": "abc"}},
		{"value with =", "AUTH_SECRET=abc=def\n", map[string]string{"AUTH_SECRET": "abc=def"}},
		{"export prefix", "export AUTH_SECRET=\"abc\"\n", map[string]string{"AUTH_SECRET": "abc"}},
		{"spaces trimmed", "  SPACED = v \nOTHER = x \n", map[string]string{"SPACED": "v", "OTHER": "x"}},
		{"double quotes unescape", `P="quoted \"value\""`, map[string]string{"P": `quoted "value"`}},
		{"double quotes, not Go syntax", `P="a\$b"`, map[string]string{"P": `a\$b`}},
		{"single quotes literal", `S='x y'` + "\n" + `T='a\nb'`, map[string]string{"S": "x y", "T": `a\nb`}},
		{"single-quoted one char", `S='d'`, map[string]string{"S": "d"}},
		{"unbalanced quotes kept", `U="abc` + "\n" + `V='abc"`, map[string]string{"U": `"abc`, "V": `'abc"`}},
		{"lone quote kept", `Q="`, map[string]string{"Q": `"`}},
		{"empty value", "E=\nF=\"\"\n", map[string]string{"E": "", "F": ""}},
		{"later wins", "K=1\nK=2\n", map[string]string{"K": "2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseEnv(strings.NewReader(tc.in), "secret.env")
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("ParseEnv = %q, want %q", got, tc.want)
			}
			for k, v := range tc.want {
				if g, ok := got[k]; !ok || g != v {
					t.Errorf("%s = %q, want %q", k, g, v)
				}
			}
		})
	}
}

func TestParseEnvBadLine(t *testing.T) {
	for _, tc := range []struct {
		name, in, where, secret string
	}{
		{"no equals", "no-equals-here\n", "s.env:1", "no-equals"},
		{"after a good line", "AUTH_SECRET=fine\nthis-is-the-secret\n", "s.env:2", "this-is-the-secret"},
		{"empty key", "=the-secret\n", "s.env:1", "the-secret"},
		{"export only key", "export =the-secret\n", "s.env:1", "the-secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseEnv(strings.NewReader(tc.in), "s.env")
			if err == nil || !strings.Contains(err.Error(), tc.where) || strings.Contains(err.Error(), tc.secret) {
				t.Fatalf("err = %v (must name %s, never echo the line)", err, tc.where)
			}
		})
	}
}

func TestParsePeers(t *testing.T) {
	type peer struct{ id, addr string }
	got, err := ParsePeers(" m1=127.0.0.1:1, m2=127.0.0.1:2 ,", func(id, addr string) peer { return peer{id, addr} })
	if err != nil || len(got) != 2 || got[0] != (peer{"m1", "127.0.0.1:1"}) || got[1] != (peer{"m2", "127.0.0.1:2"}) {
		t.Fatalf("ParsePeers = %+v, %v", got, err)
	}
	if _, err := ParsePeers("a=1,b", func(id, addr string) peer { return peer{id, addr} }); err == nil || !strings.Contains(err.Error(), `"b" is not id=quicaddr`) {
		t.Fatalf("ParsePeers(a=1,b) = %v", err)
	}
}

func TestStartupEnv(t *testing.T) {
	env := map[string]string{"AUTH_SECRET": "from-env", "TEMPEST_TOKEN": "env-token", "OTHER": "x"}
	getenv := func(k string) string { return env[k] }
	file := filepath.Join(t.TempDir(), "secret.env")
	if err := os.WriteFile(file, []byte("AUTH_SECRET=\"from-file\"\nOTHER=ignored\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	get, err := StartupEnv(file, getenv)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"AUTH_SECRET": "from-file", "TEMPEST_TOKEN": "env-token", "OTHER": "x", "AUTH_SECRET_PREVIOUS": ""} {
		if got := get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if _, err := StartupEnv(filepath.Join(t.TempDir(), "absent"), getenv); err == nil {
		t.Error("absent secret file: no error")
	}
	if get, _ := StartupEnv("", getenv); get("AUTH_SECRET") != "from-env" {
		t.Error("no secret file: environment not used")
	}
}
