package api

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"tempest/security"
)

// clientHeader carries the original client's IP on a request a follower
// forwards to the leader, so the leader rate-limits each client rather than
// every client of a follower in one bucket. Anyone can set a header, so it
// is trusted only with a proof that a holder of the cluster secret made it
// for this address, recently:
//
//	X-Tempest-Client: <ip> <unix ms> <key id, hex> <proof, base64url>
//
// where proof = Keyring.Prove(manager tier, "tempest api client v1" ‖ ip ‖
// unix ms). An API client holds only the bearer token, and a worker only the
// worker key, so neither can make one.
const clientHeader = "X-Tempest-Client"

const (
	clientProofLabel = "tempest api client v1"
	// clientProofMaxAge bounds how old (or how far ahead) a header may be;
	// a captured header is good for nothing else than its own address.
	clientProofMaxAge = time.Minute
)

func clientTranscript(ip string, ms int64) []byte {
	b := append([]byte(clientProofLabel), byte(len(ip)))
	b = append(b, ip...)
	return binary.BigEndian.AppendUint64(b, uint64(ms))
}

// signClient makes the header value for ip.
func signClient(keys *security.Keyring, ip string, now time.Time) string {
	ms := now.UnixMilli()
	id, proof, err := keys.Prove(security.TierManager, clientTranscript(ip, ms))
	if err != nil {
		return "" // a node without a manager key vouches for nobody
	}
	return fmt.Sprintf("%s %d %08x %s", ip, ms, id, base64.RawURLEncoding.EncodeToString(proof))
}

// verifyClient returns the IP a header vouches for, or an error.
func verifyClient(keys *security.Keyring, v string, now time.Time) (string, error) {
	f := strings.Fields(v)
	if len(f) != 4 || len(f[0]) > 64 {
		return "", fmt.Errorf("%s: want 4 fields", clientHeader)
	}
	ms, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return "", fmt.Errorf("%s: time: %w", clientHeader, err)
	}
	if d := now.Sub(time.UnixMilli(ms)); d > clientProofMaxAge || d < -clientProofMaxAge {
		return "", fmt.Errorf("%s: made %s ago, outside ±%s", clientHeader, d.Round(time.Second), clientProofMaxAge)
	}
	id, err := strconv.ParseUint(f[2], 16, 32)
	if err != nil {
		return "", fmt.Errorf("%s: key id: %w", clientHeader, err)
	}
	proof, err := base64.RawURLEncoding.DecodeString(f[3])
	if err != nil {
		return "", fmt.Errorf("%s: proof: %w", clientHeader, err)
	}
	if err := keys.VerifyProof(security.TierManager, uint32(id), clientTranscript(f[0], ms), proof); err != nil {
		return "", fmt.Errorf("%s: %w", clientHeader, err)
	}
	return f[0], nil
}

// rateKey is who a request counts against: its vouched-for original client
// when a follower forwarded it with a valid header, else its remote IP.
func (s *Server) rateKey(r *http.Request) string {
	ip := clientIP(r)
	v := r.Header.Get(clientHeader)
	if v == "" || s.cfg.Keyring == nil {
		return ip
	}
	orig, err := verifyClient(s.cfg.Keyring, v, s.cfg.Now())
	if err != nil {
		s.metrics.badClientHeader()
		s.log.Debug("untrusted client header; limiting by remote address", "remote", ip, "err", err)
		return ip
	}
	return orig
}
