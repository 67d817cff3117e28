package security

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

func TestValidateSecret(t *testing.T) {
	tests := []struct {
		name   string
		secret string
		// want is a fragment of the reason; "" means the secret is accepted.
		want string
	}{
		{"empty", "", "empty"},
		{"short", "short-secret", "too short: 12 bytes, need at least 32"},
		{"one short of the minimum", secretOld[:31], "too short: 31 bytes"},
		{"sample value", SampleSecret, "sample value from the documentation"},
		{"one character repeated", strings.Repeat("a", 64), "one character repeated"},
		{"few distinct bytes", strings.Repeat("abc", 16), "only 3 distinct characters, need at least 8"},
		{"word with few letters", strings.Repeat("password", 4), "only 7 distinct characters"},
		{"pattern repeated", strings.Repeat("abcdefgh", 4), "8-character pattern repeated"},
		{"pattern repeated, cut short", strings.Repeat("Password1!", 4)[:36], "10-character pattern repeated"},
		{"half and half", secretOld[:16] + secretOld[:16], "16-character pattern repeated"},
		{"alphabet run", "ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdef", "simple run"},
		{"digit run", "0123456789:;<=>?@ABCDEFGHIJKLMNOPQRS", "simple run"},
		{"common words", "changeme-tempest-admin-secret-password", "common words"},
		{"common words, mixed case", "LetMeIn_Qwerty_123456_Admin_Root_Secret", "common words"},
		{"common words, no separators", "tempestsecretchangemeadminpassword", "common words"},
		{"trailing newline", secretOld + "\n", "padded with whitespace"},
		{"leading space", " " + secretOld, "padded with whitespace"},

		{"random", secretOld, ""},
		{"random with symbols", secretNew, ""},
		{"passphrase", "correct horse battery staple tempest", ""},
		{"exactly the minimum", secretOther[:32], ""},
		{"hex", "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateSecret(tt.secret)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("ValidateSecret refused a good secret: %v", err)
				}
				return
			}
			var weak *WeakSecretError
			if !errors.As(err, &weak) {
				t.Fatalf("ValidateSecret = %v, want *WeakSecretError", err)
			}
			if weak.Var != "AUTH_SECRET" {
				t.Errorf("Var = %q, want AUTH_SECRET", weak.Var)
			}
			if !strings.Contains(weak.Reason, tt.want) {
				t.Errorf("Reason = %q, want it to contain %q", weak.Reason, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "AUTH_SECRET is ") {
				t.Errorf("Error() = %q, want it to start with the variable name", err)
			}
			if len(tt.secret) >= 8 && strings.Contains(err.Error(), strings.TrimSpace(tt.secret)) {
				t.Errorf("Error() = %q reveals the secret", err)
			}
		})
	}
}

func TestValidateSecretMessage(t *testing.T) {
	// The operator-facing wording is part of the product: docs quote it.
	err := ValidateSecret("short-secret")
	want := `AUTH_SECRET is too short: 12 bytes, need at least 32 (generate one with "tempest secret generate")`
	if err == nil || err.Error() != want {
		t.Fatalf("ValidateSecret(12 bytes) = %v\nwant %s", err, want)
	}
}

func TestGenerateSecret(t *testing.T) {
	seen := make(map[string]bool)
	for range 100 {
		s, err := GenerateSecret()
		if err != nil {
			t.Fatalf("GenerateSecret: %v", err)
		}
		if len(s) != 43 {
			t.Fatalf("len = %d, want 43: %q", len(s), s)
		}
		raw, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil || len(raw) != 32 {
			t.Fatalf("%q is not 32 bytes of unpadded base64url: %d bytes, %v", s, len(raw), err)
		}
		if err := ValidateSecret(s); err != nil {
			t.Fatalf("generated secret refused: %v", err)
		}
		if seen[s] {
			t.Fatalf("GenerateSecret repeated %q", s)
		}
		seen[s] = true
	}
}

func TestKeyID(t *testing.T) {
	// Key ids appear in envelopes and operators' logs; a change here is a
	// wire-incompatible change, so pin one value.
	if got, want := KeyID(secretOld), KeyID(secretOld); got != want {
		t.Fatalf("KeyID not stable: %08x then %08x", got, want)
	}
	if got, want := KeyID(secretOld), uint32(keyIDGoldenOld); got != want {
		t.Errorf("KeyID(secretOld) = %08x, want %08x", got, want)
	}
	if KeyID(secretOld) == KeyID(secretNew) {
		t.Errorf("different secrets share key id %08x", KeyID(secretOld))
	}
}

const keyIDGoldenOld = 0xca3aa338

func FuzzValidateSecret(f *testing.F) {
	for _, s := range []string{"", "short", SampleSecret, secretOld, strings.Repeat("ab", 20), "changeme-changeme-changeme-changeme"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := ValidateSecret(s)
		if err == nil {
			if len(s) < MinSecretLen {
				t.Fatalf("accepted a %d-byte secret", len(s))
			}
			return
		}
		var weak *WeakSecretError
		if !errors.As(err, &weak) || weak.Reason == "" {
			t.Fatalf("error %v is not a *WeakSecretError with a reason", err)
		}
	})
}
