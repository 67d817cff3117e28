// Package securitytest helps tests that need cluster secrets; like
// net/http/httptest, it is imported by tests only.
package securitytest

import (
	"testing"

	"tempest/security"
)

// Secret is a fresh cluster secret, strong enough for security.NewKeyring.
func Secret(t testing.TB) string {
	t.Helper()
	s, err := security.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s
}
