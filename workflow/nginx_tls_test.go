package workflow

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tempest/internal/testutil"
)

// testPKI is a CA, a server certificate for 127.0.0.1 and a client
// certificate, all signed by the CA, as PEM.
type testPKI struct {
	ca, serverCert, serverKey, clientCert, clientKey []byte
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	newKey := func() (*ecdsa.PrivateKey, []byte) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return k, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	}
	sign := func(tmpl, parent *x509.Certificate, pub, signer any) []byte {
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	}
	now := time.Now()
	caKey, _ := newKey()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tempest test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	var p testPKI
	p.ca = sign(caTmpl, caTmpl, &caKey.PublicKey, caKey)
	srvKey, srvPEM := newKey()
	p.serverKey = srvPEM
	p.serverCert = sign(&x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}},
		caTmpl, &srvKey.PublicKey, caKey)
	cliKey, cliPEM := newKey()
	p.clientKey = cliPEM
	p.clientCert = sign(&x509.Certificate{SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "load-client"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
		caTmpl, &cliKey.PublicKey, caKey)
	return p
}

// nginxMTLSConf requires a client certificate the CA signed
// (ssl_verify_client on) and answers with the client's subject; the access
// log has "protocol status verify" per request.
const nginxMTLSConf = `
daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 256; }
http {
    log_format mtls '$server_protocol $status $ssl_client_verify';
    access_log %[1]s/access.log mtls;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    server {
        listen 127.0.0.1:%[2]d ssl http2;
        ssl_certificate %[1]s/server.pem;
        ssl_certificate_key %[1]s/server.key;
        ssl_client_certificate %[1]s/ca.pem;
        ssl_verify_client on;
        location / {
            default_type text/plain;
            return 200 "hello $ssl_client_s_dn";
        }
    }
}
`

// startNginxMTLS runs nginx with nginxMTLSConf and returns its https URL and
// its access log's path.
func startNginxMTLS(t *testing.T, pki testPKI) (string, string) {
	t.Helper()
	bin := nginxBinary(t)
	dir := t.TempDir()
	for name, b := range map[string][]byte{"server.pem": pki.serverCert, "server.key": pki.serverKey, "ca.pem": pki.ca} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	port := testutil.FreeTCPPort(t)
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, nginxMTLSConf, dir, port), 0o600); err != nil {
		t.Fatal(err)
	}
	waitNginx(t, bin, dir, conf, fmt.Sprintf("127.0.0.1:%d", port))
	return fmt.Sprintf("https://127.0.0.1:%d", port), filepath.Join(dir, "access.log")
}

// waitAccessLog waits until nginx has logged want lines (it writes a line
// after it answered, so the last may land just after the client returned)
// and returns them.
func waitAccessLog(t *testing.T, path string, want int) []string {
	t.Helper()
	var lines []string
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		lines = strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(b) == 0 {
			lines = nil
		}
		if len(lines) < want {
			return fmt.Errorf("access log has %d lines, want %d", len(lines), want)
		}
		return nil
	})
	return lines
}

// Mutual TLS against nginx with ssl_verify_client on, over the lean
// HTTP/1.1 client and over h2: with the job's CA and client certificate
// every request is answered 200 for the client's subject, counted exactly
// against nginx's log; without the client certificate nginx answers 400,
// and without the CA the handshake fails (the target's certificate is not
// trusted) and nothing reaches nginx's log.
func TestNginxMutualTLS(t *testing.T) {
	pki := newTestPKI(t)
	base, logPath := startNginxMTLS(t, pki)
	const iters = 40
	logged := 0
	for _, proto := range []Protocol{ProtocolHTTP1, ProtocolH2} {
		t.Run(proto.String(), func(t *testing.T) {
			run := func(tlsp *HTTPTLS) Result {
				p := HTTPParams{VUs: 2, Iterations: iters, Protocol: proto, TLS: tlsp, Steps: []HTTPStep{{Name: "hello", Method: "GET", URL: base + "/",
					Checks: []HTTPCheck{{Name: "client", Kind: CheckBodyContains, Value: "CN=load-client"}}}}}
				if err := p.Validate(); err != nil {
					t.Fatal(err)
				}
				res, err := runHTTP(t, p, Env{})
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			res := run(&HTTPTLS{CA: pki.ca, Cert: pki.clientCert, Key: pki.clientKey})
			hello := stepNamed(t, res, "hello")
			if hello.Completed != iters || hello.Failed != 0 || fmt.Sprint(checkCounts(hello)) != fmt.Sprintf("map[client:[%d 0]]", iters) {
				t.Fatalf("with the client certificate: completed %d failed %d errors %v checks %v", hello.Completed, hello.Failed, hello.Errors, checkCounts(hello))
			}
			logged += iters
			wantProto := map[Protocol]string{ProtocolHTTP1: "HTTP/1.1", ProtocolH2: "HTTP/2.0"}[proto]
			lines := waitAccessLog(t, logPath, logged)
			for _, l := range lines[logged-iters:] {
				if l != wantProto+" 200 SUCCESS" {
					t.Fatalf("nginx logged %q, want %q", l, wantProto+" 200 SUCCESS")
				}
			}

			res = run(&HTTPTLS{CA: pki.ca})
			if hello := stepNamed(t, res, "hello"); hello.Statuses[400] != iters || hello.Errors[ErrorStatus] != iters {
				t.Fatalf("without a client certificate: statuses %v errors %v, want %d 400s", hello.Statuses, hello.Errors, iters)
			}
			logged += iters
			lines = waitAccessLog(t, logPath, logged)
			for _, l := range lines[logged-iters:] {
				if l != wantProto+" 400 NONE" {
					t.Fatalf("nginx logged %q, want %q", l, wantProto+" 400 NONE")
				}
			}

			res = run(&HTTPTLS{Cert: pki.clientCert, Key: pki.clientKey})
			if hello := stepNamed(t, res, "hello"); hello.Failed != iters || hello.Completed != 0 {
				t.Fatalf("without the CA: completed %d failed %d errors %v, want every handshake refused", hello.Completed, hello.Failed, hello.Errors)
			}
			if lines := waitAccessLog(t, logPath, logged); len(lines) != logged {
				t.Fatalf("nginx logged %d requests, want %d: an untrusted target gets none", len(lines), logged)
			}
		})
	}
}
