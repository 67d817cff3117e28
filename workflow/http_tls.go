package workflow

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
)

// HTTPTLS is a workflow's TLS to its targets (job file: tls: {ca: ca.pem,
// cert: client.pem, key: client.key}), for every protocol that speaks TLS
// (https:// under http1, h2, h3). `tempest submit` reads the files; their
// bytes travel in the params like a secret's value, never as a blob, and are
// never shown back.
type HTTPTLS struct {
	// CA is a PEM bundle of the certificates trusted for the targets
	// instead of the worker's system roots; empty: the system roots.
	CA []byte `cbor:"1,keyasint,omitempty"`
	// Cert and Key are a PEM client certificate (chain) and its private
	// key, presented to targets that ask for one (mutual TLS); both or
	// neither.
	Cert []byte `cbor:"2,keyasint,omitempty"`
	Key  []byte `cbor:"3,keyasint,omitempty"`
}

// parseTLS reads tls: {ca, cert, key}.
func parseTLS(f *Fields) *HTTPTLS {
	tf, ok := f.Object("tls")
	if !ok {
		return nil
	}
	t := &HTTPTLS{}
	t.CA, _ = tf.TLSFile("ca")
	t.Cert, _ = tf.TLSFile("cert")
	t.Key, _ = tf.TLSFile("key")
	if tf.Has("cert") != tf.Has("key") {
		tf.Problemf("cert and key go together: a client certificate needs its key")
	}
	if !tf.Has("ca") && !tf.Has("cert") && !tf.Has("key") {
		tf.Problemf("tls needs ca, or cert and key, or all three")
	}
	return t
}

// validate checks that the files hold what they should. Messages never
// quote them.
func (t *HTTPTLS) validate(errs *FieldErrors, insecure bool) {
	if t == nil {
		return
	}
	if len(t.CA) > MaxTLSFile || len(t.Cert) > MaxTLSFile || len(t.Key) > MaxTLSFile {
		errs.add("tls", "a file is more than %d bytes", MaxTLSFile)
		return
	}
	if len(t.CA) > 0 {
		if insecure {
			errs.add("tls.ca", "cannot be combined with insecure_skip_verify, which trusts any certificate")
		} else if !x509.NewCertPool().AppendCertsFromPEM(t.CA) {
			errs.add("tls.ca", "holds no PEM certificate")
		}
	}
	switch {
	case (len(t.Cert) > 0) != (len(t.Key) > 0):
		errs.add("tls", "cert and key go together: a client certificate needs its key")
	case len(t.Cert) > 0:
		if _, err := tls.X509KeyPair(t.Cert, t.Key); err != nil {
			// crypto/tls's reason names what is wrong (no certificate, a
			// key that does not match) without quoting either file.
			errs.add("tls.cert", "cert and key are not a PEM certificate and its private key: %v", err)
		}
	}
}

// tlsConfig is the client TLS configuration of a run: nil when the params
// ask for nothing beyond the defaults.
func (p *HTTPParams) tlsConfig() (*tls.Config, error) {
	if !p.InsecureSkipVerify && p.TLS == nil {
		return nil, nil
	}
	cfg := &tls.Config{InsecureSkipVerify: p.InsecureSkipVerify} //nolint:gosec // the job file's explicit say-so
	if p.TLS == nil {
		return cfg, nil
	}
	if len(p.TLS.CA) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(p.TLS.CA) {
			return nil, errors.New("tls: ca holds no PEM certificate")
		}
		cfg.RootCAs = pool
	}
	if len(p.TLS.Cert) > 0 {
		pair, err := tls.X509KeyPair(p.TLS.Cert, p.TLS.Key)
		if err != nil {
			return nil, fmt.Errorf("tls: client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
