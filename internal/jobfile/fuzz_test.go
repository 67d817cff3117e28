package jobfile

import (
	"errors"
	"strings"
	"testing"

	"tempest/workflow"
)

// FuzzParse feeds Parse what any API client could send. It must never
// panic; a file it accepts must hold only specs the registry accepts (what a
// manager checks), and a file it refuses must say why, with each problem
// placed within the file.
func FuzzParse(f *testing.F) {
	f.Add(minimal)
	f.Add(strings.Replace(minimal, "duration: 5s", "iterations: 2000", 1))
	f.Add(`{"name":"j","datacenters":["a","b"],"workflows":[{"name":"w","type":"http","vus":2,"iterations":3,` +
		`"steps":[{"name":"s","url":"http://x/","headers":{"A":"b"},"body":"x","expect_status":[200,201]}]}]}`)
	f.Add("name: a\ndatacenters: 3\nworkflows: [{name: n, type: sleep, duration: 1s, timeout: 2s}]\n")
	f.Add(billionLaughs())
	f.Add("a: &x 1\nb: *x\n<<: {c: 1}\n")
	f.Add("name: !!binary aGk=\nworkflows: [{name: n, type: sleep, duration: 1s, duration: 2s}]\n")
	f.Add("name: a\nworkflows:\n\t- x\n")
	f.Add("- 1\n---\n- 2\n")
	f.Add("")
	f.Add(strings.Repeat("[", 100))
	f.Add("name: a\nworkflows: [{name: w, type: http, vus: 1e3, duration: 1s, steps: [{name: s, url: 'http://x/', headers: {'a b': [1]}}]}]\n")

	f.Add("name: a\nworkflows: [{name: w, type: http, vus: '{{env.VUS}}', duration: 1s, tls: {ca: ca.pem}, " +
		"setup: [{name: l, url: 'http://{{env.HOST}}/', body: '{{secret.PW}}', captures: [{name: t, json: t}]}], " +
		"steps: [{name: s, url: 'http://x/', headers: {A: '{{t}} {{secret.PW}}'}}]}]\n")

	reg := workflow.DefaultRegistry()
	// Every variable and secret has a value, so the fuzzer reaches what
	// the values flow into; a TLS file is any name's bytes.
	env := WithEnv(func(name string) (string, bool) { return name, len(name)%3 != 0 })
	secrets := WithSecrets(func(name string) (string, bool) { return "s-" + name, true })
	tlsFiles := WithTLSFiles(func(name string) ([]byte, error) { return []byte(name), nil })
	f.Fuzz(func(t *testing.T, src string) {
		sub, err := Parse([]byte(src), "fuzz.yaml", reg, env, secrets, tlsFiles)
		if err == nil {
			if sub == nil || sub.Name == "" || len(sub.Workflows) == 0 {
				t.Fatalf("accepted an incomplete submission: %+v", sub)
			}
			for _, spec := range sub.Workflows {
				if err := reg.Validate(spec); err != nil {
					t.Fatalf("accepted a spec the registry refuses: %v", err)
				}
			}
			return
		}
		var jerr *Error
		if !errors.As(err, &jerr) || len(jerr.Problems) == 0 || sub != nil {
			t.Fatalf("refused without problems: %v (%T)", err, err)
		}
		// YAML breaks lines at \r, \n and a few Unicode separators, and may
		// place an end-of-stream error one line past the last.
		lines := 2
		for _, sep := range []string{"\r", "\n", "\u0085", "\u2028", "\u2029"} {
			lines += strings.Count(src, sep)
		}
		for _, p := range jerr.Problems {
			if p.Message == "" || p.Line < 0 || p.Line > lines {
				t.Fatalf("problem %+v out of place in a %d-line file", p, lines)
			}
		}
	})
}
