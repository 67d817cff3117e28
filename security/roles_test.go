package security

import (
	"errors"
	"strings"
	"testing"
)

// A worker key derived from AUTH_SECRET seals and proves only as a worker;
// a manager key derives the worker key too; AUTH_SECRET derives both. The
// cluster key id is the same on all of them.
func TestRoleSecrets(t *testing.T) {
	workerSecret, err := DeriveRoleSecret(secretOld, TierWorker)
	if err != nil {
		t.Fatal(err)
	}
	managerSecret, err := DeriveRoleSecret(secretOld, TierManager)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(workerSecret, "tempest-worker-v1.") || !strings.HasPrefix(managerSecret, "tempest-manager-v1.") {
		t.Fatalf("role secrets %q, %q", workerSecret, managerSecret)
	}
	if again, _ := DeriveRoleSecret(managerSecret, TierWorker); again != workerSecret {
		t.Fatalf("worker key from the manager key %q differs from the one from AUTH_SECRET %q", again, workerSecret)
	}
	if _, err := DeriveRoleSecret(workerSecret, TierManager); err == nil {
		t.Fatal("a worker key derived a manager key")
	}
	cluster := mustKeyring(t, secretOld, "")
	manager := mustKeyring(t, managerSecret, "")
	worker := mustKeyring(t, workerSecret, "")
	for _, k := range []*Keyring{cluster, manager, worker} {
		if k.SendKeyID() != KeyID(secretOld) {
			t.Fatalf("key id %08x, want the cluster's %08x", k.SendKeyID(), KeyID(secretOld))
		}
	}
	if worker.Tier() != TierWorker || manager.Tier() != TierManager || cluster.Tier() != TierCluster {
		t.Fatalf("tiers %s %s %s", worker.Tier(), manager.Tier(), cluster.Tier())
	}
	if _, _, err := worker.Prove(TierManager, []byte("x")); !errors.Is(err, ErrNoTierKey) {
		t.Fatalf("worker proving as manager: %v, want ErrNoTierKey", err)
	}
	if _, err := worker.NewStreamSealer(TierManager).Seal(nil, nil, []byte("x")); !errors.Is(err, ErrNoTierKey) {
		t.Fatalf("worker sealing as manager: %v, want ErrNoTierKey", err)
	}
	// What a worker seals, the cluster opens as a worker's; not as a
	// manager's.
	s, err := worker.NewStreamSealer(TierWorker).Seal(nil, []byte("aad"), []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.NewStreamOpener(TierWorker).Open(s.KeyID, s.Salt, s.Nonce, []byte("aad"), s.Ciphertext, nil); err != nil {
		t.Fatalf("cluster opening a worker's message: %v", err)
	}
	if _, err := cluster.NewStreamOpener(TierManager).Open(s.KeyID, s.Salt, s.Nonce, []byte("aad"), s.Ciphertext, nil); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("a worker's message opened as a manager's: %v", err)
	}
	id, proof, err := manager.Prove(TierManager, []byte("t"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.VerifyProof(TierManager, id, []byte("t"), proof); err != nil {
		t.Fatalf("cluster verifying a manager's proof: %v", err)
	}
	if err := worker.VerifyProof(TierManager, id, []byte("t"), proof); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("a worker verified a manager proof: %v", err)
	}
	// Gossip keys match across the tiers, so workers and managers share SWIM.
	if string(worker.MemberlistKeys()[0]) != string(cluster.MemberlistKeys()[0]) {
		t.Fatal("worker and cluster gossip keys differ")
	}
	// Rotation: a worker holding new and old role keys accepts both.
	newWorker, err := DeriveRoleSecret(secretNew, TierWorker)
	if err != nil {
		t.Fatal(err)
	}
	rot := mustKeyring(t, newWorker, workerSecret)
	if ids := rot.AcceptedKeyIDs(); len(ids) != 2 || ids[0] != KeyID(secretNew) || ids[1] != KeyID(secretOld) {
		t.Fatalf("rotating worker accepts %08x", ids)
	}
	if _, err := rot.NewStreamOpener(TierWorker).Open(s.KeyID, s.Salt, s.Nonce, []byte("aad"), s.Ciphertext, nil); err != nil {
		t.Fatalf("rotating worker refused the old worker key: %v", err)
	}
	if _, err := NewKeyring("tempest-worker-v1.zz.abc", ""); err == nil {
		t.Fatal("malformed role secret accepted")
	}
}
