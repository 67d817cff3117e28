package target

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"strings"
	"testing"
)

// A TLS target answers HTTPS to a client that trusts the certificate it
// made at start, over HTTP/1.1, and counts those requests; a plain-text
// request gets no answer from it.
func TestTLSTarget(t *testing.T) {
	s, base := startTarget(t, func(c *Config) { c.TLS = true })
	url := strings.Replace(base, "http://", "https://", 1)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(s.CertificatePEM()) {
		t.Fatalf("certificate PEM does not parse: %q", s.CertificatePEM())
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	for range 3 {
		resp, err := client.Get(url + "/")
		if err != nil {
			t.Fatalf("GET over TLS: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "ok" || resp.ProtoMajor != 1 || resp.TLS == nil {
			t.Fatalf("GET over TLS: %s %s %q tls=%v", resp.Status, resp.Proto, body, resp.TLS != nil)
		}
	}
	if got := s.Stats().Requests; got != 3 {
		t.Errorf("target counted %d requests, want 3", got)
	}
	plain := &http.Client{Transport: &http.Transport{}}
	if resp, err := plain.Get(base + "/"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("a plain-text request was answered 200 by the TLS target")
		}
	}
	if s2, _ := startTarget(t, nil); s2.CertificatePEM() != nil {
		t.Error("a plain target has a certificate")
	}
}
