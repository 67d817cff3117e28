package main

import (
	"bytes"
	"strings"
	"testing"

	"tempest/security"
)

func TestSecretDerive(t *testing.T) {
	const secret = "derive-test-Hq7vT2xK9mW4pZ1cR8nF5sL3yJ6dG0aB"
	env := func(k string) string {
		if k == "AUTH_SECRET" {
			return secret
		}
		return ""
	}
	var out, errb bytes.Buffer
	if code := runSecretDerive([]string{"--role", "worker"}, env, &out, &errb); code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	got := strings.TrimSpace(out.String())
	k, err := security.NewKeyring(got, "")
	if err != nil {
		t.Fatalf("derived secret refused: %v", err)
	}
	if k.Tier() != security.TierWorker || k.SendKeyID() != security.KeyID(secret) {
		t.Fatalf("derived key: tier %s, key id %08x", k.Tier(), k.SendKeyID())
	}
	for _, args := range [][]string{{"--role", "gate"}, {"--role", "boss"}, {}} {
		out.Reset()
		if code := runSecretDerive(args, env, &out, &errb); code != exitUsage || out.Len() != 0 {
			t.Errorf("derive %v: exit %d, printed %q", args, code, out.String())
		}
	}
	if code := runSecretDerive([]string{"--role", "worker"}, func(string) string { return "" }, &out, &errb); code != exitUsage {
		t.Errorf("derive without AUTH_SECRET: exit %d", code)
	}
}
