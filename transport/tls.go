package transport

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"time"
)

// alpn names our protocol so a stray QUIC client (an HTTP/3 browser, say)
// fails the handshake instead of speaking garbage to us.
const alpn = "tempest/1"

// selfSignedTLS makes a fresh certificate at start-up. QUIC requires TLS
// 1.3, which gives every hop privacy and integrity; cluster membership is
// proven by the sealed envelope, not by the certificate, so peers do not
// verify it. That keeps deployment free of a CA while anyone lacking the
// AUTH_SECRET still gets nothing through.
func selfSignedTLS(nodeID string) (server, client *tls.Config, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("tls key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, nil, fmt.Errorf("tls serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "tempest " + nodeID},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"tempest"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("tls certificate: %w", err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	server = &tls.Config{
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{alpn},
		MinVersion:   tls.VersionTLS13,
	}
	client = &tls.Config{
		// See the function comment: identity comes from the envelope.
		InsecureSkipVerify: true, //nolint:gosec
		NextProtos:         []string{alpn},
		MinVersion:         tls.VersionTLS13,
	}
	return server, client, nil
}
