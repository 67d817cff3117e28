package security

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"
)

// SampleSecret is the AUTH_SECRET value shown in the documentation and sample
// configs. It is public, so ValidateSecret refuses it.
const SampleSecret = "tempest-sample-secret-replace-me-0123456789"

// MinSecretLen is the shortest AUTH_SECRET accepted, in bytes. A secret
// from GenerateSecret carries 256 bits; 32 bytes of typed text carry less, so
// this is a floor against obviously short secrets, not a strength guarantee.
const MinSecretLen = 32

const (
	// minDistinctBytes refuses secrets such as "abababab…" that pass the
	// length check but are built from a handful of symbols.
	minDistinctBytes = 8
	// generateHint ends most refusals: the fix is nearly always a new secret.
	generateHint = `(generate one with "tempest secret generate")`
	// keyIDLabel is the fixed message HMAC'd to name a secret. Changing it
	// changes every key id in every log, so it is versioned.
	keyIDLabel = "tempest key id v1"
)

// commonWords are words and fragments people type when asked for a secret.
// A secret made only of these (and separators) is refused however long it
// is. The list is deliberately short: it catches "changeme-changeme-…", not
// every weak passphrase.
var commonWords = [...]string{
	"password", "passw0rd", "secret", "changeme", "change", "replace", "me", "my",
	"tempest", "admin", "administrator", "root", "letmein", "welcome", "qwerty",
	"asdf", "zxcv", "default", "example", "sample", "test", "demo", "token",
	"key", "auth", "cluster", "abc", "123", "1234", "12345", "123456", "1234567",
	"12345678", "123456789", "1234567890", "0123456789", "iloveyou", "dragon",
	"monkey", "master", "login", "trustno1", "hunter2",
}

// WeakSecretError reports a secret refused by ValidateSecret or NewKeyring.
// The message never contains any part of the secret.
type WeakSecretError struct {
	// Var names the setting the secret came from (AUTH_SECRET or
	// AUTH_SECRET_PREVIOUS).
	Var string
	// Reason completes the sentence "<Var> is …" and says how to fix it.
	Reason string
}

func (e *WeakSecretError) Error() string {
	v := e.Var
	if v == "" {
		v = "AUTH_SECRET"
	}
	return v + " is " + e.Reason
}

// ValidateSecret refuses secrets that are short or obviously weak: shorter
// than MinSecretLen bytes, padded with whitespace, one character or a short
// pattern repeated, built from fewer than 8 distinct bytes, a simple run such
// as "abcdef…", made only of common words, or the documented SampleSecret.
// The error is a *WeakSecretError.
func ValidateSecret(s string) error {
	return validateSecret("AUTH_SECRET", s)
}

func validateSecret(name, s string) error {
	if reason := weakness(s); reason != "" {
		return &WeakSecretError{Var: name, Reason: reason}
	}
	return nil
}

// weakness returns why s is refused, or "" if it is acceptable. Checks run
// from the most specific message to the most general.
func weakness(s string) string {
	switch {
	case s == SampleSecret:
		return "the sample value from the documentation, which is public " + generateHint
	case s == "":
		return "empty " + generateHint
	case len(s) < MinSecretLen:
		return fmt.Sprintf("too short: %d bytes, need at least %d %s", len(s), MinSecretLen, generateHint)
	case strings.TrimSpace(s) != s:
		// Secrets are used byte for byte; a trailing newline in one node's
		// env file would silently split the cluster.
		return "padded with whitespace at the start or end (check the env file for a stray space or newline and remove it)"
	}
	switch d := distinctBytes(s); {
	case d == 1:
		return "one character repeated " + generateHint
	case d < minDistinctBytes:
		return fmt.Sprintf("too repetitive: only %d distinct characters, need at least %d %s", d, minDistinctBytes, generateHint)
	}
	if p := period(s); p <= len(s)/2 {
		return fmt.Sprintf("a %d-character pattern repeated %s", p, generateHint)
	}
	if constantStep(s) {
		return `a simple run of characters such as "abcdef…" ` + generateHint
	}
	if onlyCommonWords(strings.ToLower(s)) {
		return `made only of common words such as "password" or "changeme" ` + generateHint
	}
	return ""
}

func distinctBytes(s string) int {
	var seen [256]bool
	n := 0
	for i := 0; i < len(s); i++ {
		if !seen[s[i]] {
			seen[s[i]] = true
			n++
		}
	}
	return n
}

// period returns the length of the shortest p such that s[i] == s[i-p] for
// every i >= p, i.e. s is its first p bytes repeated (the last copy may be
// cut short). It uses the KMP failure function, so it is linear in len(s).
func period(s string) int {
	n := len(s)
	if n == 0 {
		return 0
	}
	fail := make([]int, n)
	k := 0
	for i := 1; i < n; i++ {
		for k > 0 && s[i] != s[k] {
			k = fail[k-1]
		}
		if s[i] == s[k] {
			k++
		}
		fail[i] = k
	}
	return n - fail[n-1]
}

// constantStep reports whether consecutive bytes all differ by the same
// amount, as in "abcdefgh…" or "0246…"; such strings have many distinct bytes
// and no repeated pattern, yet no entropy.
func constantStep(s string) bool {
	if len(s) < 2 {
		return true
	}
	step := s[1] - s[0]
	for i := 2; i < len(s); i++ {
		if s[i]-s[i-1] != step {
			return false
		}
	}
	return true
}

// isSeparator lists the characters people put between words.
func isSeparator(c byte) bool {
	return strings.IndexByte(" -_.,:;/+|!@#$%^&*~", c) >= 0
}

// onlyCommonWords reports whether lower (already lower-cased) splits entirely
// into commonWords and separators, by the usual word-break dynamic program.
func onlyCommonWords(lower string) bool {
	n := len(lower)
	ok := make([]bool, n+1) // ok[i]: lower[:i] splits
	ok[0] = true
	for i := 0; i < n; i++ {
		if !ok[i] {
			continue
		}
		if isSeparator(lower[i]) {
			ok[i+1] = true
		}
		for _, w := range commonWords {
			if strings.HasPrefix(lower[i:], w) {
				ok[i+len(w)] = true
			}
		}
	}
	return ok[n]
}

// GenerateSecret returns a new secret for AUTH_SECRET: 32 bytes from
// crypto/rand, base64url without padding (43 characters, safe in env files
// and shells).
func GenerateSecret() (string, error) {
	var b [32]byte
	// A random 43-character string fails ValidateSecret with negligible
	// probability; looping keeps the promise that a generated secret is
	// always accepted.
	for range 8 {
		if _, err := rand.Read(b[:]); err != nil {
			return "", fmt.Errorf("generate secret: %w", err)
		}
		s := base64.RawURLEncoding.EncodeToString(b[:])
		if weakness(s) == "" {
			return s, nil
		}
	}
	return "", fmt.Errorf("generate secret: random source keeps producing weak secrets")
}

// KeyID names a secret in logs, metrics and envelopes without revealing it:
// the first 4 bytes of HMAC-SHA256 keyed by the secret over a fixed label.
// Equal secrets have equal ids on every node.
func KeyID(secret string) uint32 {
	return keyID([]byte(secret))
}

func keyID(secret []byte) uint32 {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(keyIDLabel))
	var sum [sha256.Size]byte
	return binary.BigEndian.Uint32(m.Sum(sum[:0]))
}
