package security

import (
	"bytes"
	"errors"
	"sync"
	"testing"
)

func TestStreamSealerRoundTripAndNonces(t *testing.T) {
	k := mustKeyring(t, secretOld, "")
	s := k.NewStreamSealer(TierCluster)
	o := k.NewStreamOpener(TierCluster)
	seen := map[string]bool{}
	var salt []byte
	for i := 0; i < 1000; i++ {
		msg := []byte{byte(i), byte(i >> 8)}
		sealed, err := s.Seal(nil, []byte("aad"), msg)
		if err != nil {
			t.Fatal(err)
		}
		if salt == nil {
			salt = sealed.Salt
		} else if !bytes.Equal(salt, sealed.Salt) {
			t.Fatalf("message %d: salt changed without a rekey", i)
		}
		if seen[string(sealed.Nonce)] {
			t.Fatalf("message %d: nonce repeated under one key", i)
		}
		seen[string(sealed.Nonce)] = true
		// Both openers accept stream-sealed envelopes.
		for name, open := range map[string]func() ([]byte, error){
			"keyring": func() ([]byte, error) {
				return k.Open(sealed.KeyID, sealed.Salt, sealed.Nonce, []byte("aad"), sealed.Ciphertext, nil)
			},
			"stream": func() ([]byte, error) {
				return o.Open(sealed.KeyID, sealed.Salt, sealed.Nonce, []byte("aad"), sealed.Ciphertext, nil)
			},
		} {
			got, err := open()
			if err != nil || !bytes.Equal(got, msg) {
				t.Fatalf("message %d via %s opener: %v", i, name, err)
			}
		}
	}
	// Tampering is still caught through the cache.
	sealed, _ := s.Seal(nil, []byte("aad"), []byte("x"))
	if _, err := o.Open(sealed.KeyID, sealed.Salt, sealed.Nonce, []byte("aaX"), sealed.Ciphertext, nil); !errors.Is(err, ErrAuthFailed) {
		t.Fatalf("tampered aad: want ErrAuthFailed, got %v", err)
	}
	// The opener also opens per-message seals.
	one, _ := k.Seal(nil, nil, []byte("y"))
	if got, err := o.Open(one.KeyID, one.Salt, one.Nonce, nil, one.Ciphertext, nil); err != nil || string(got) != "y" {
		t.Fatalf("per-message seal via stream opener: %v", err)
	}
}

func TestStreamSealerFollowsReload(t *testing.T) {
	k := mustKeyring(t, secretOld, "")
	s := k.NewStreamSealer(TierCluster)
	o := k.NewStreamOpener(TierCluster)
	before, _ := s.Seal(nil, nil, []byte("a"))
	if _, err := o.Open(before.KeyID, before.Salt, before.Nonce, nil, before.Ciphertext, nil); err != nil {
		t.Fatal(err)
	}
	if err := k.Reload(secretNew, secretOld); err != nil {
		t.Fatal(err)
	}
	after, _ := s.Seal(nil, nil, []byte("b"))
	if after.KeyID == before.KeyID || bytes.Equal(after.Salt, before.Salt) {
		t.Fatalf("sealer kept the old key after reload")
	}
	// The previous secret is still accepted, cached or not.
	if _, err := o.Open(before.KeyID, before.Salt, before.Nonce, nil, before.Ciphertext, nil); err != nil {
		t.Fatalf("previous key refused during rotation: %v", err)
	}
	if err := k.Reload(secretNew, ""); err != nil {
		t.Fatal(err)
	}
	// Once dropped, the cached key must stop working immediately.
	if _, err := o.Open(before.KeyID, before.Salt, before.Nonce, nil, before.Ciphertext, nil); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("dropped key still opened via cache: %v", err)
	}
}

func TestStreamSealerConcurrentNoncesUnique(t *testing.T) {
	k := mustKeyring(t, secretOld, "")
	s := k.NewStreamSealer(TierCluster)
	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				sealed, err := s.Seal(nil, nil, []byte("m"))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if seen[string(sealed.Nonce)] {
					t.Error("nonce repeated across goroutines")
				}
				seen[string(sealed.Nonce)] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

func BenchmarkStreamSeal1KiB(b *testing.B) {
	k := mustKeyring(b, secretOld, "")
	s := k.NewStreamSealer(TierCluster)
	msg := make([]byte, 1024)
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		if _, err := s.Seal(nil, nil, msg); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkStreamOpen1KiB(b *testing.B) {
	k := mustKeyring(b, secretOld, "")
	s := k.NewStreamSealer(TierCluster)
	o := k.NewStreamOpener(TierCluster)
	sealed, _ := s.Seal(nil, nil, make([]byte, 1024))
	b.SetBytes(1024)
	for b.Loop() {
		if _, err := o.Open(sealed.KeyID, sealed.Salt, sealed.Nonce, nil, sealed.Ciphertext, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// The transport seals with Next into the frame that carries the header, and
// opens in place over the ciphertext: both must give the plaintext back.
func TestStreamSealerNextAndOpenInPlace(t *testing.T) {
	k := mustKeyring(t, secretOld, "")
	s := k.NewStreamSealer(TierCluster)
	o := k.NewStreamOpener(TierCluster)
	if _, err := s.Next(make([]byte, NonceSize-1)); !errors.Is(err, ErrBadSealedFields) {
		t.Fatalf("short nonce buffer: %v", err)
	}
	var n1, n2 [NonceSize]byte
	if _, err := s.Next(n1[:]); err != nil {
		t.Fatal(err)
	}
	k2, err := s.Next(n2[:])
	if err != nil {
		t.Fatal(err)
	}
	if n1 == n2 {
		t.Fatal("two messages got the same nonce")
	}
	msg := bytes.Repeat([]byte("plaintext"), 100)
	header := []byte("header")
	frame := k2.Seal(bytes.Clone(header), n2[:], []byte("aad"), msg)
	if !bytes.HasPrefix(frame, header) {
		t.Fatal("Seal did not append after the header")
	}
	ct := frame[len(header):]
	got, err := o.Open(k2.KeyID, k2.Salt, n2[:], []byte("aad"), ct, ct[:0])
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("open in place: %v", err)
	}
	if &got[0] != &ct[0] {
		t.Error("plaintext was not written over the ciphertext")
	}
}
