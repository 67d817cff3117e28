package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"net"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
)

// newQUICFloor is the diagnostic third floor (-quic-floor): bare quic-go on
// loopback with the transport's quic.Config, one connection, one stream per
// caller, the same framing and echo as the TCP floor. It pays QUIC's own
// TLS 1.3 packet protection and user-space packet handling, and nothing of
// Tempest's (no envelope, HKDF/AES-GCM, replay guard, rate limiter, breaker
// or reply demultiplexing), so secure/quic isolates Tempest's layers and
// quic/tcp isolates quic-go itself.
func newQUICFloor(payload []byte, conc int) ([]caller, func(), error) {
	serverTLS, clientTLS, err := floorTLS()
	if err != nil {
		return nil, nil, err
	}
	// Mirrors transport.NewQUIC's quic.Config.
	qc := &quic.Config{
		HandshakeIdleTimeout:       3 * time.Second,
		MaxIdleTimeout:             30 * time.Second,
		KeepAlivePeriod:            5 * time.Second,
		MaxIncomingStreams:         int64(4 * 64),
		MaxStreamReceiveWindow:     16 << 20,
		MaxConnectionReceiveWindow: 64 << 20,
	}
	var closers []func()
	cleanup := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	listen := func() (*quic.Transport, error) {
		udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return nil, err
		}
		tr := &quic.Transport{Conn: udp}
		closers = append(closers, func() { tr.Close(); udp.Close() })
		return tr, nil
	}
	srvTr, err := listen()
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	ln, err := srvTr.Listen(serverTLS, qc)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	closers = append(closers, func() { cancel(); ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.CloseWithError(0, "")
				for {
					s, err := conn.AcceptStream(ctx)
					if err != nil {
						return
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						defer s.Close()
						serveEcho(s, s)
					}()
				}
			}()
		}
	}()

	cliTr, err := listen()
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	dctx, dcancel := context.WithTimeout(ctx, 3*time.Second)
	defer dcancel()
	conn, err := cliTr.Dial(dctx, ln.Addr(), clientTLS, qc)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	closers = append(closers, func() { conn.CloseWithError(0, "") })
	callers := make([]caller, conc)
	for i := range callers {
		s, err := conn.OpenStreamSync(dctx)
		if err != nil {
			cleanup()
			return nil, nil, err
		}
		callers[i] = framedCaller(s, s, payload)
	}
	return callers, cleanup, nil
}

// floorTLS makes a throwaway self-signed P-256 certificate, as the
// transport does, with the same ALPN-style setup.
func floorTLS() (server, client *tls.Config, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"bench"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	const proto = "tempest-bench-floor"
	server = &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		NextProtos:   []string{proto},
		MinVersion:   tls.VersionTLS13,
	}
	client = &tls.Config{InsecureSkipVerify: true, NextProtos: []string{proto}, MinVersion: tls.VersionTLS13} //nolint:gosec // throwaway loopback benchmark
	return server, client, nil
}
