package api_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tempest/api"
	"tempest/api/apitest"
	"tempest/workflow"
)

// selfSigned writes a certificate for 127.0.0.1 and its key, and returns
// their paths and a pool trusting the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "tempest-test"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

func TestTLS(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	srv := apitest.Serve(t, apitest.NewBackend(), func(c *api.ServerConfig) {
		c.TLSCertFile, c.TLSKeyFile = certFile, keyFile
	})
	if !strings.HasPrefix(srv.URL(), "https://") {
		t.Fatalf("URL %q, want https", srv.URL())
	}
	c, err := api.NewClient([]string{srv.URL()}, apitest.Token, api.WithTLSConfig(&tls.Config{RootCAs: pool}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Jobs(context.Background()); err != nil {
		t.Fatalf("over TLS: %v", err)
	}
	// Without trusting the certificate, the client refuses the server.
	untrusting := newClient(t, srv.URL())
	if _, err := untrusting.Jobs(context.Background()); err == nil {
		t.Fatal("client accepted an unknown certificate")
	}

	// A missing key file fails Start, not the first request.
	cfg := api.DefaultServerConfig()
	cfg.Listen, cfg.Token, cfg.Registry = "127.0.0.1:0", apitest.Token, workflow.DefaultRegistry()
	cfg.TLSCertFile, cfg.TLSKeyFile = certFile, filepath.Join(t.TempDir(), "missing.pem")
	s := api.NewServer(cfg, apitest.NewBackend())
	if err := s.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "TLS") {
		s.Shutdown(context.Background())
		t.Fatalf("Start with a missing key: %v", err)
	}
}

// With a client CA the API requires a client certificate from it (mutual
// TLS): a client with none, or with one from another CA, is refused before
// any request; one whose certificate the CA signed is served.
func TestMutualTLS(t *testing.T) {
	certFile, keyFile, _ := selfSigned(t)
	serverCA := certFile // the server's certificate is its own CA
	ca := apitest.NewCA(t, "clients-ca")
	caFile := ca.File
	clientCert, clientKey := ca.Issue(t, "ci-runner")
	strangerCert, strangerKey := apitest.NewCA(t, "other-ca").Issue(t, "stranger")
	srv := apitest.Serve(t, apitest.NewBackend(), func(c *api.ServerConfig) {
		c.TLSCertFile, c.TLSKeyFile, c.TLSClientCAFile = certFile, keyFile, caFile
	})

	for _, tc := range []struct {
		name           string
		cert, key      string
		served         bool
		refusedBecause string
	}{
		{"no certificate", "", "", false, "certificate"},
		{"another CA's", strangerCert, strangerKey, false, "certificate"},
		{"the CA's", clientCert, clientKey, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := api.ClientTLS(serverCA, tc.cert, tc.key)
			if err != nil {
				t.Fatal(err)
			}
			c, err := api.NewClient([]string{srv.URL()}, apitest.Token, api.WithTLSConfig(cfg), api.WithRequestTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, err = c.Jobs(context.Background())
			switch {
			case tc.served && err != nil:
				t.Fatalf("refused: %v", err)
			case !tc.served && err == nil:
				t.Fatal("served without a certificate the CA signed")
			case !tc.served && !strings.Contains(err.Error(), tc.refusedBecause):
				t.Fatalf("refused with %v, want the certificate named", err)
			}
		})
	}

	if _, err := api.ClientTLS("", clientCert, ""); err == nil {
		t.Error("a certificate without its key was accepted")
	}
	cfg := api.DefaultServerConfig()
	cfg.Listen, cfg.Token, cfg.Registry, cfg.TLSClientCAFile = "127.0.0.1:0", apitest.Token, workflow.DefaultRegistry(), caFile
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "TLSClientCAFile") {
		t.Errorf("a client CA without TLS: %v", err)
	}
}
