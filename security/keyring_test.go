package security

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

func mustKeyring(t testing.TB, current, previous string) *Keyring {
	t.Helper()
	k, err := NewKeyring(current, previous)
	if err != nil {
		t.Fatalf("NewKeyring: %v", err)
	}
	return k
}

func mustSeal(t testing.TB, k *Keyring, dst, aad, plaintext []byte) Sealed {
	t.Helper()
	s, err := k.Seal(dst, aad, plaintext)
	if err != nil {
		t.Fatalf("Seal: %v", err)
	}
	return s
}

func openSealed(k *Keyring, s Sealed, aad []byte) ([]byte, error) {
	return k.Open(s.KeyID, s.Salt, s.Nonce, aad, s.Ciphertext, nil)
}

func TestSealOpenRoundTrip(t *testing.T) {
	k := mustKeyring(t, secretOld, "")
	tests := []struct {
		name      string
		aad       []byte
		plaintext []byte
	}{
		{"empty", nil, nil},
		{"empty plaintext with header", []byte("v1|node-a|dispatch|42"), nil},
		{"one byte", nil, []byte{0x7f}},
		{"1 KiB", []byte("hdr"), bytes.Repeat([]byte("x"), 1<<10)},
		{"64 KiB", []byte("hdr"), bytes.Repeat([]byte{1, 2, 3}, 64<<10/3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustSeal(t, k, nil, tt.aad, tt.plaintext)
			if s.KeyID != k.SendKeyID() || len(s.Salt) != SaltSize || len(s.Nonce) != NonceSize {
				t.Fatalf("sealed fields: key %08x (send %08x), salt %d bytes, nonce %d bytes", s.KeyID, k.SendKeyID(), len(s.Salt), len(s.Nonce))
			}
			if got, want := len(s.Ciphertext), len(tt.plaintext)+TagSize; got != want {
				t.Fatalf("ciphertext is %d bytes, want %d", got, want)
			}
			got, err := openSealed(k, s, tt.aad)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if !bytes.Equal(got, tt.plaintext) {
				t.Fatalf("Open returned %d bytes that differ from the %d sealed", len(got), len(tt.plaintext))
			}
		})
	}
}

func TestSealAppendsToDst(t *testing.T) {
	k := mustKeyring(t, secretOld, "")
	prefix := []byte("frame-header:")
	buf := make([]byte, len(prefix), 4096)
	copy(buf, prefix)
	s := mustSeal(t, k, buf, nil, []byte("body"))
	if !bytes.HasPrefix(s.Ciphertext, prefix) {
		t.Fatalf("Ciphertext %q does not start with dst", s.Ciphertext)
	}
	if &s.Ciphertext[0] != &buf[0] {
		t.Errorf("Seal reallocated although dst had room")
	}
	out := append([]byte("plain:"), make([]byte, 0, 64)...)
	got, err := k.Open(s.KeyID, s.Salt, s.Nonce, nil, s.Ciphertext[len(prefix):], out)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if string(got) != "plain:body" {
		t.Fatalf("Open = %q, want plaintext appended to dst", got)
	}
}

func TestOpenRejectsTampering(t *testing.T) {
	k := mustKeyring(t, secretNew, secretOld)
	aad := []byte("v1|node-a|progress|7")
	good := mustSeal(t, k, nil, aad, []byte("the quick brown fox"))
	flip := func(b []byte, i int) []byte {
		c := slices.Clone(b)
		c[i] ^= 0x01
		return c
	}
	tests := []struct {
		name   string
		mutate func(s *Sealed, aad *[]byte)
		want   error
	}{
		{"aad byte", func(s *Sealed, a *[]byte) { *a = flip(*a, 3) }, ErrAuthFailed},
		{"aad dropped", func(s *Sealed, a *[]byte) { *a = nil }, ErrAuthFailed},
		{"ciphertext byte", func(s *Sealed, a *[]byte) { s.Ciphertext = flip(s.Ciphertext, 0) }, ErrAuthFailed},
		{"tag byte", func(s *Sealed, a *[]byte) { s.Ciphertext = flip(s.Ciphertext, len(s.Ciphertext)-1) }, ErrAuthFailed},
		{"ciphertext truncated", func(s *Sealed, a *[]byte) { s.Ciphertext = s.Ciphertext[:len(s.Ciphertext)-1] }, ErrAuthFailed},
		{"ciphertext extended", func(s *Sealed, a *[]byte) { s.Ciphertext = append(slices.Clone(s.Ciphertext), 0) }, ErrAuthFailed},
		{"salt byte", func(s *Sealed, a *[]byte) { s.Salt = flip(s.Salt, 15) }, ErrAuthFailed},
		{"nonce byte", func(s *Sealed, a *[]byte) { s.Nonce = flip(s.Nonce, 0) }, ErrAuthFailed},
		{"key id of the other accepted key", func(s *Sealed, a *[]byte) { s.KeyID = KeyID(secretOld) }, ErrAuthFailed},
		{"key id unknown", func(s *Sealed, a *[]byte) { s.KeyID ^= 1 }, ErrUnknownKey},
		{"salt short", func(s *Sealed, a *[]byte) { s.Salt = s.Salt[:SaltSize-1] }, ErrBadSealedFields},
		{"salt missing", func(s *Sealed, a *[]byte) { s.Salt = nil }, ErrBadSealedFields},
		{"nonce long", func(s *Sealed, a *[]byte) { s.Nonce = append(slices.Clone(s.Nonce), 0) }, ErrBadSealedFields},
		{"ciphertext shorter than tag", func(s *Sealed, a *[]byte) { s.Ciphertext = s.Ciphertext[:TagSize-1] }, ErrBadSealedFields},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, a := good, slices.Clone(aad)
			tt.mutate(&s, &a)
			got, err := openSealed(k, s, a)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Open = %q, %v; want %v", got, err, tt.want)
			}
			if got != nil {
				t.Errorf("Open returned %d bytes with an error", len(got))
			}
		})
	}
	if _, err := openSealed(k, good, aad); err != nil {
		t.Fatalf("untampered message no longer opens: %v", err)
	}
}

func TestSealIsRandomised(t *testing.T) {
	k := mustKeyring(t, secretOld, "")
	pt := []byte("same plaintext, same header")
	a := mustSeal(t, k, nil, pt, pt)
	b := mustSeal(t, k, nil, pt, pt)
	if bytes.Equal(a.Salt, b.Salt) || bytes.Equal(a.Nonce, b.Nonce) || bytes.Equal(a.Ciphertext, b.Ciphertext) {
		t.Fatalf("two seals of one plaintext share salt, nonce or ciphertext")
	}
}

func TestOpenErrorsNameTheKey(t *testing.T) {
	a := mustKeyring(t, secretNew, "")
	b := mustKeyring(t, secretOld, "")
	_, err := openSealed(b, mustSeal(t, a, nil, nil, []byte("x")), nil)
	for _, want := range []string{fmt.Sprintf("%08x", KeyID(secretNew)), fmt.Sprintf("%08x", KeyID(secretOld))} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name key %s", err, want)
		}
	}
	if strings.Contains(err.Error(), secretNew) || strings.Contains(err.Error(), secretOld) {
		t.Errorf("error %v reveals a secret", err)
	}
}

// TestRotation walks the three-pass rotation over two nodes, reloading one
// node at a time as an operator would, and checks after every reload that
// each node opens what the other seals.
func TestRotation(t *testing.T) {
	type secrets struct{ current, previous string }
	var (
		initial = secrets{secretOld, ""}
		install = secrets{secretOld, secretNew}
		use     = secrets{secretNew, secretOld}
		remove  = secrets{secretNew, ""}
	)
	steps := []struct {
		name string
		node string // "A" or "B"
		to   secrets
	}{
		{"pass 1 install: A accepts new", "A", install},
		{"pass 1 install: B accepts new", "B", install},
		{"pass 2 use: A sends new", "A", use},
		{"pass 2 use: B sends new", "B", use},
		{"pass 3 remove: A drops old", "A", remove},
		{"pass 3 remove: B drops old", "B", remove},
	}
	nodes := map[string]*Keyring{
		"A": mustKeyring(t, initial.current, initial.previous),
		"B": mustKeyring(t, initial.current, initial.previous),
	}
	for i, st := range steps {
		if err := nodes[st.node].Reload(st.to.current, st.to.previous); err != nil {
			t.Fatalf("step %d %s: Reload: %v", i, st.name, err)
		}
		for _, dir := range [][2]string{{"A", "B"}, {"B", "A"}} {
			from, to := nodes[dir[0]], nodes[dir[1]]
			msg := []byte(st.name)
			if _, err := openSealed(to, mustSeal(t, from, nil, nil, msg), nil); err != nil {
				t.Errorf("step %d %s: %s -> %s refused: %v", i, st.name, dir[0], dir[1], err)
			}
		}
	}

	// After pass 3 a node that never rotated is out in both directions.
	stale := mustKeyring(t, secretOld, "")
	if _, err := openSealed(nodes["A"], mustSeal(t, stale, nil, nil, []byte("x")), nil); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("old-only -> rotated: %v, want ErrUnknownKey", err)
	}
	if _, err := openSealed(stale, mustSeal(t, nodes["A"], nil, nil, []byte("x")), nil); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("rotated -> old-only: %v, want ErrUnknownKey", err)
	}
}

// TestRotationSkippingInstallBreaks shows why pass 1 exists: a node that
// starts sending with the new secret before its peers accept it is refused.
func TestRotationSkippingInstallBreaks(t *testing.T) {
	a := mustKeyring(t, secretNew, secretOld)
	b := mustKeyring(t, secretOld, "")
	if _, err := openSealed(b, mustSeal(t, a, nil, nil, []byte("x")), nil); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("new-sender -> old-only peer: %v, want ErrUnknownKey", err)
	}
	if _, err := openSealed(a, mustSeal(t, b, nil, nil, []byte("x")), nil); err != nil {
		t.Fatalf("old-only -> node accepting old: %v", err)
	}
}

func TestKeyringIDs(t *testing.T) {
	tests := []struct {
		name              string
		current, previous string
		want              []uint32
	}{
		{"current only", secretOld, "", []uint32{KeyID(secretOld)}},
		{"current then previous", secretNew, secretOld, []uint32{KeyID(secretNew), KeyID(secretOld)}},
		{"same secret twice", secretOld, secretOld, []uint32{KeyID(secretOld)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := mustKeyring(t, tt.current, tt.previous)
			if got := k.AcceptedKeyIDs(); !slices.Equal(got, tt.want) {
				t.Errorf("AcceptedKeyIDs = %08x, want %08x", got, tt.want)
			}
			if got := k.SendKeyID(); got != tt.want[0] {
				t.Errorf("SendKeyID = %08x, want %08x", got, tt.want[0])
			}
			if got := len(k.MemberlistKeys()); got != len(tt.want) {
				t.Errorf("%d memberlist keys, want %d", got, len(tt.want))
			}
		})
	}
}

func TestNewKeyringRefusesWeakSecrets(t *testing.T) {
	tests := []struct {
		name              string
		current, previous string
		wantVar           string
	}{
		{"weak current", "changeme", "", "AUTH_SECRET"},
		{"sample current", SampleSecret, secretOld, "AUTH_SECRET"},
		{"weak previous", secretNew, strings.Repeat("z", 40), "AUTH_SECRET_PREVIOUS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewKeyring(tt.current, tt.previous)
			var weak *WeakSecretError
			if !errors.As(err, &weak) {
				t.Fatalf("NewKeyring = %v, want *WeakSecretError", err)
			}
			if weak.Var != tt.wantVar {
				t.Errorf("error names %s, want %s: %v", weak.Var, tt.wantVar, err)
			}
		})
	}
}

func TestReloadRefusedKeepsKeys(t *testing.T) {
	k := mustKeyring(t, secretOld, "")
	s := mustSeal(t, k, nil, nil, []byte("before"))
	if err := k.Reload("too-short", ""); err == nil {
		t.Fatal("Reload accepted a weak secret")
	}
	if k.SendKeyID() != KeyID(secretOld) {
		t.Fatalf("refused Reload changed the send key")
	}
	if _, err := openSealed(k, s, nil); err != nil {
		t.Fatalf("refused Reload broke Open: %v", err)
	}
}

func TestMemberlistKeys(t *testing.T) {
	a := mustKeyring(t, secretNew, secretOld)
	b := mustKeyring(t, secretOld, secretNew)
	ka, kb := a.MemberlistKeys(), b.MemberlistKeys()
	if len(ka) != 2 || len(ka[0]) != 32 || len(ka[1]) != 32 {
		t.Fatalf("memberlist keys: %d keys of %d and %d bytes, want 2 of 32", len(ka), len(ka[0]), len(ka[1]))
	}
	// Same secrets derive the same keys on every node; order follows which
	// secret is current, because memberlist encrypts with the first.
	if !bytes.Equal(ka[0], kb[1]) || !bytes.Equal(ka[1], kb[0]) {
		t.Fatalf("keys differ between nodes with the same secrets")
	}
	if bytes.Equal(ka[0], ka[1]) {
		t.Fatalf("two secrets derived one key")
	}
	if bytes.Contains([]byte(secretNew), ka[0][:8]) || bytes.Equal(ka[0], []byte(secretNew)) {
		t.Fatalf("memberlist key is the raw secret")
	}
	ka[0][0] ^= 0xff
	if bytes.Equal(ka[0], a.MemberlistKeys()[0]) {
		t.Fatalf("MemberlistKeys exposes the keyring's own slice")
	}
}

// TestReloadDuringTraffic flips the keyring between the two middle rotation
// states while senders and receivers run; under -race this checks that
// Reload and Seal/Open share no unsynchronised state, and that every message
// opens because both states accept both secrets.
func TestReloadDuringTraffic(t *testing.T) {
	sender := mustKeyring(t, secretOld, secretNew)
	receiver := mustKeyring(t, secretNew, secretOld)
	stop := make(chan struct{})
	var reloader sync.WaitGroup
	reloader.Add(1)
	go func() {
		defer reloader.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			cur, prev := secretOld, secretNew
			if i%2 == 1 {
				cur, prev = prev, cur
			}
			if err := sender.Reload(cur, prev); err != nil {
				t.Errorf("Reload: %v", err)
				return
			}
		}
	}()
	var workers sync.WaitGroup
	for w := range 4 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			var buf, out []byte
			for i := range 300 {
				msg := fmt.Appendf(nil, "worker %d message %d", w, i)
				s, err := sender.Seal(buf[:0], nil, msg)
				if err != nil {
					t.Errorf("Seal: %v", err)
					return
				}
				buf = s.Ciphertext
				out, err = receiver.Open(s.KeyID, s.Salt, s.Nonce, nil, s.Ciphertext, out[:0])
				if err != nil || !bytes.Equal(out, msg) {
					t.Errorf("Open during reload: %q, %v", out, err)
					return
				}
			}
		}()
	}
	workers.Wait()
	close(stop)
	reloader.Wait()
}

// sealFixed seals with a chosen salt and nonce, for known answers and for a
// fuzz oracle that must agree across fuzz worker processes. Production code
// never chooses its salt or nonce.
func sealFixed(t testing.TB, k *Keyring, salt, nonce, aad, plaintext []byte) Sealed {
	t.Helper()
	ks := k.keys.Load()
	sk := ks.send[ks.top]
	aead, err := sk.aead(salt)
	if err != nil {
		t.Fatalf("derive: %v", err)
	}
	return Sealed{KeyID: sk.id, Salt: salt, Nonce: nonce, Ciphertext: aead.Seal(nil, nonce, plaintext, aad)}
}

var (
	fixedSalt  = []byte("0123456789abcdef")
	fixedNonce = []byte("nonce-012345")
)

// TestSealKnownAnswer pins the key derivation and cipher: a change here
// means old and new binaries can no longer talk, which must be deliberate.
// The expected values were computed independently (RFC 5869 HKDF by hand
// with Python's hmac, AES-GCM from pyca/cryptography).
func TestSealKnownAnswer(t *testing.T) {
	k := mustKeyring(t, secretOld, "")
	s := sealFixed(t, k, fixedSalt, fixedNonce, []byte("hdr"), []byte("known answer"))
	if got := hex.EncodeToString(s.Ciphertext); got != knownAnswerHex {
		t.Fatalf("ciphertext = %s\nwant       %s", got, knownAnswerHex)
	}
	ct, _ := hex.DecodeString(knownAnswerHex)
	got, err := k.Open(KeyID(secretOld), fixedSalt, fixedNonce, []byte("hdr"), ct, nil)
	if err != nil || string(got) != "known answer" {
		t.Fatalf("Open(known answer) = %q, %v", got, err)
	}
}

const knownAnswerHex = "8e30d498d303274e743382410bac239fbff57f0eee4a9b5d1d0803fc"

// The gossip key is derived from the secret's worker key (workers gossip
// with managers), so its value pins the role derivation too.
func TestMemberlistKeyKnownAnswer(t *testing.T) {
	const want = "2ff34034741acc9d6a52314450f1c45d1971fb401191f853ad5819927c552ee8"
	if got := hex.EncodeToString(mustKeyring(t, secretOld, "").MemberlistKeys()[0]); got != want {
		t.Fatalf("memberlist key = %s\nwant             %s", got, want)
	}
}

func FuzzOpen(f *testing.F) {
	k := mustKeyring(f, secretNew, secretOld)
	aad := []byte("v1|node-a|dispatch|1")
	good := sealFixed(f, k, fixedSalt, fixedNonce, aad, []byte("fuzz me"))
	f.Add(good.KeyID, good.Salt, good.Nonce, aad, good.Ciphertext)
	f.Add(KeyID(secretOld), good.Salt, good.Nonce, aad, good.Ciphertext)
	f.Add(uint32(0), []byte{}, []byte{}, []byte{}, []byte{})
	f.Add(good.KeyID, good.Salt[:4], good.Nonce, aad, good.Ciphertext[:3])
	f.Fuzz(func(t *testing.T, keyID uint32, salt, nonce, aad2, ct []byte) {
		out, err := k.Open(keyID, salt, nonce, aad2, ct, nil)
		if err != nil {
			if out != nil {
				t.Fatalf("Open returned output with error %v", err)
			}
			if !errors.Is(err, ErrBadSealedFields) && !errors.Is(err, ErrUnknownKey) && !errors.Is(err, ErrAuthFailed) {
				t.Fatalf("Open error %v wraps none of the documented sentinels", err)
			}
			return
		}
		// Only the genuine message may open: anything else is a forgery.
		if keyID != good.KeyID || !bytes.Equal(salt, good.Salt) || !bytes.Equal(nonce, good.Nonce) ||
			!bytes.Equal(aad2, aad) || !bytes.Equal(ct, good.Ciphertext) {
			t.Fatalf("Open accepted a message that was never sealed")
		}
		if string(out) != "fuzz me" {
			t.Fatalf("Open = %q", out)
		}
	})
}

func BenchmarkSeal1KiB(b *testing.B)  { benchmarkSeal(b, 1<<10) }
func BenchmarkSeal64KiB(b *testing.B) { benchmarkSeal(b, 64<<10) }

func benchmarkSeal(b *testing.B, size int) {
	k := mustKeyring(b, secretOld, "")
	pt := make([]byte, size)
	aad := []byte("v1|node-a|dispatch|1")
	buf := make([]byte, 0, size+TagSize)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := k.Seal(buf[:0], aad, pt); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkOpen1KiB(b *testing.B) {
	k := mustKeyring(b, secretOld, "")
	pt := make([]byte, 1<<10)
	aad := []byte("v1|node-a|dispatch|1")
	s := mustSeal(b, k, nil, aad, pt)
	buf := make([]byte, 0, len(pt))
	b.SetBytes(int64(len(pt)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := k.Open(s.KeyID, s.Salt, s.Nonce, aad, s.Ciphertext, buf[:0]); err != nil {
			b.Fatal(err)
		}
	}
}

func TestProofBindsSecretAndTranscript(t *testing.T) {
	a, err := NewKeyring(secretOld, "")
	if err != nil {
		t.Fatal(err)
	}
	id, proof, err := a.Prove(TierCluster, []byte("session one"))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.VerifyProof(TierCluster, id, []byte("session one"), proof); err != nil {
		t.Fatalf("own proof refused: %v", err)
	}
	if err := a.VerifyProof(TierCluster, id, []byte("session two"), proof); !errors.Is(err, ErrAuthFailed) {
		t.Fatalf("proof moved to another transcript: want ErrAuthFailed, got %v", err)
	}
	if err := a.VerifyProof(TierCluster, id^1, []byte("session one"), proof); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("unknown key id: want ErrUnknownKey, got %v", err)
	}
	// During a rotation the previous secret's proofs are accepted, and
	// dropped with it.
	b, err := NewKeyring(secretNew, secretOld)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.VerifyProof(TierCluster, id, []byte("session one"), proof); err != nil {
		t.Fatalf("previous secret's proof refused mid-rotation: %v", err)
	}
	if err := b.Reload(secretNew, ""); err != nil {
		t.Fatal(err)
	}
	if err := b.VerifyProof(TierCluster, id, []byte("session one"), proof); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("proof with a removed secret: want ErrUnknownKey, got %v", err)
	}
}
