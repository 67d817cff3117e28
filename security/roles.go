package security

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"golang.org/x/crypto/hkdf"
)

// Tier ranks the keys derived from one AUTH_SECRET. A key of a tier derives
// the keys of every tier below it, never above: a host given only the worker
// key cannot make a manager's.
//
//	TierCluster: AUTH_SECRET itself (gates; any node given the raw secret)
//	TierManager: HKDF(AUTH_SECRET, "tempest role v1 manager")
//	TierWorker:  HKDF(manager key, "tempest role v1 worker")
//
// Two nodes talk with the key of the lower of their tiers, so a worker-key
// holder can seal only what the worker tier may send, and receivers refuse
// from it the message types that only higher tiers send.
type Tier uint8

const (
	TierNone    Tier = 0
	TierWorker  Tier = 1
	TierManager Tier = 2
	TierCluster Tier = 3
	numTiers         = 4
)

func (t Tier) String() string {
	switch t {
	case TierWorker:
		return "worker"
	case TierManager:
		return "manager"
	case TierCluster:
		return "cluster"
	}
	return fmt.Sprintf("tier(%d)", uint8(t))
}

// ParseRole names the tier of a role ("worker", "manager", "gate"/"cluster").
func ParseRole(role string) (Tier, error) {
	switch strings.ToLower(role) {
	case "worker":
		return TierWorker, nil
	case "manager":
		return TierManager, nil
	case "gate", "cluster":
		return TierCluster, nil
	}
	return TierNone, fmt.Errorf("unknown role %q (want worker, manager or gate)", role)
}

// A role secret is written "tempest-<role>-v1.<cluster key id>.<key>": the
// prefix says its tier, the key id is that of the AUTH_SECRET it was derived
// from (so `tempest cluster` shows one key id for every node of a cluster
// whatever its role), and the key is 32 bytes, base64url.
const roleSecretVersion = "v1"

func roleInfo(t Tier) []byte { return []byte("tempest role v1 " + t.String()) }

// tierSecret is one parsed AUTH_SECRET or role secret.
type tierSecret struct {
	tier    Tier
	display uint32 // the cluster key id
	key     []byte // the tier's key bytes (the raw secret for TierCluster)
}

// parseSecret reads an AUTH_SECRET value: a role secret by its prefix, else
// a raw cluster secret, which must pass ValidateSecret.
func parseSecret(name, s string) (tierSecret, error) {
	for _, t := range []Tier{TierWorker, TierManager} {
		prefix := "tempest-" + t.String() + "-" + roleSecretVersion + "."
		if !strings.HasPrefix(s, prefix) {
			continue
		}
		idHex, keyB64, ok := strings.Cut(s[len(prefix):], ".")
		id, err := hex.DecodeString(idHex)
		if !ok || err != nil || len(id) != 4 {
			return tierSecret{}, &WeakSecretError{Var: name, Reason: "a " + t.String() + " key with a malformed key id (make it again with \"tempest secret derive --role " + t.String() + "\")"}
		}
		key, err := base64.RawURLEncoding.DecodeString(keyB64)
		if err != nil || len(key) != keySize {
			return tierSecret{}, &WeakSecretError{Var: name, Reason: "a " + t.String() + " key whose key part is not 32 bytes of base64url (make it again with \"tempest secret derive --role " + t.String() + "\")"}
		}
		return tierSecret{tier: t, display: uint32(id[0])<<24 | uint32(id[1])<<16 | uint32(id[2])<<8 | uint32(id[3]), key: key}, nil
	}
	if err := validateSecret(name, s); err != nil {
		return tierSecret{}, err
	}
	return tierSecret{tier: TierCluster, display: keyID([]byte(s)), key: []byte(s)}, nil
}

// chain returns the key of every tier at or below ts.tier, indexed by tier.
func (ts tierSecret) chain() ([numTiers][]byte, error) {
	var keys [numTiers][]byte
	keys[ts.tier] = ts.key
	for t := ts.tier; t > TierWorker; t-- {
		k := make([]byte, keySize)
		if _, err := io.ReadFull(hkdf.New(sha256.New, keys[t], nil, roleInfo(t-1)), k); err != nil {
			return keys, fmt.Errorf("derive %s key: %w", t-1, err)
		}
		keys[t-1] = k
	}
	return keys, nil
}

// DeriveRoleSecret derives from secret (an AUTH_SECRET, or a role secret of
// a higher tier) the secret to give a host of role: for a worker host, a key
// that seals only what workers send. Deriving is deterministic, so a
// rotation derives the new secret's role secret the same way on any host.
func DeriveRoleSecret(secret string, role Tier) (string, error) {
	if role != TierWorker && role != TierManager {
		if role == TierCluster {
			return "", errors.New("gates hold AUTH_SECRET itself; there is nothing to derive")
		}
		return "", fmt.Errorf("cannot derive a key for %s", role)
	}
	ts, err := parseSecret("AUTH_SECRET", secret)
	if err != nil {
		return "", err
	}
	if ts.tier < role {
		return "", fmt.Errorf("a %s key cannot derive a %s key: derive from AUTH_SECRET", ts.tier, role)
	}
	keys, err := ts.chain()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("tempest-%s-%s.%08x.%s", role, roleSecretVersion, ts.display, base64.RawURLEncoding.EncodeToString(keys[role])), nil
}
