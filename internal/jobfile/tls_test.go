package jobfile

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"tempest/workflow"
)

func tlsJob(tls string) string {
	return "name: j\nworkflows:\n  - name: w\n    type: http\n    duration: 1s\n" + tls +
		"    steps:\n      - name: s\n        url: https://127.0.0.1:8443/\n"
}

func parseTLS(t *testing.T, src string, files map[string][]byte) (*workflow.HTTPParams, error) {
	t.Helper()
	read := func(name string) ([]byte, error) {
		if b, ok := files[name]; ok {
			return b, nil
		}
		return nil, fmt.Errorf("%s: %w", name, os.ErrNotExist)
	}
	sub, err := Parse([]byte(src), "tls.yaml", workflow.DefaultRegistry(), WithTLSFiles(read))
	if err != nil {
		return nil, err
	}
	return decodeParams(t, sub.Workflows[0]).(*workflow.HTTPParams), nil
}

// The files tls: names are read where the job file is parsed and carried
// in the params; every misuse is refused at its line, and no problem
// quotes a file (a key is a secret). testdata/tls holds a CA and a client
// certificate it signed (openssl, P-256).
func TestTLSFiles(t *testing.T) {
	files := map[string][]byte{"junk.pem": []byte("not pem")}
	for _, name := range []string{"ca.pem", "client.pem", "client.key"} {
		b, err := os.ReadFile("testdata/tls/" + name)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
	p, err := parseTLS(t, tlsJob("    tls: {ca: ca.pem, cert: client.pem, key: client.key}\n"), files)
	if err != nil {
		t.Fatal(err)
	}
	if p.TLS == nil || string(p.TLS.CA) != string(files["ca.pem"]) || string(p.TLS.Cert) != string(files["client.pem"]) ||
		string(p.TLS.Key) != string(files["client.key"]) {
		t.Fatalf("tls %+v, want the three files", p.TLS)
	}
	for _, tt := range []struct{ tls, want string }{
		{"    tls: {cert: client.pem}\n", "tls.yaml:6: workflows[0].tls: cert and key go together"},
		{"    tls: {ca: junk.pem}\n", "tls.yaml:6: workflows[0].tls.ca: holds no PEM certificate"},
		{"    tls: {ca: missing.pem}\n", "tls.yaml:6: workflows[0].tls.ca: cannot read ca file: missing.pem: file does not exist"},
		{"    tls: {cert: client.pem, key: ca.pem}\n", "tls.yaml:6: workflows[0].tls.cert: cert and key are not a PEM certificate and its private key"},
		{"    tls: {ca: ca.pem, crt: client.pem}\n", `tls.yaml:6: workflows[0].tls: unknown key "crt"`},
		{"    tls: {}\n", "tls.yaml:6: workflows[0].tls: tls needs ca, or cert and key, or all three"},
		{"    insecure_skip_verify: true\n    tls: {ca: ca.pem}\n", "workflows[0].tls.ca: cannot be combined with insecure_skip_verify"},
	} {
		_, err := parseTLS(t, tlsJob(tt.tls), files)
		var jfe *Error
		if !errors.As(err, &jfe) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want %q", strings.TrimSpace(tt.tls), err, tt.want)
			continue
		}
		if strings.Contains(err.Error(), "PRIVATE KEY") || strings.Contains(err.Error(), "BEGIN CERTIFICATE") {
			t.Errorf("a problem quotes a file: %v", err)
		}
	}
	// A server given no files refuses the reference at its line.
	if _, err := Parse([]byte(tlsJob("    tls: {ca: ca.pem}\n")), "tls.yaml", workflow.DefaultRegistry()); err == nil ||
		!strings.Contains(err.Error(), `tls.yaml:6: workflows[0].tls.ca: file "ca.pem" cannot be read here`) {
		t.Errorf("parse without a reader: %v", err)
	}
}
