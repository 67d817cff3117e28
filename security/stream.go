package security

import (
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"
)

// Deriving a key per message costs a few microseconds (HKDF plus the AES key
// schedule), a fifth of a secure round trip on loopback. A long-lived stream
// carrying many messages can instead derive one key from one random salt and
// number its nonces, which is what StreamSealer and StreamOpener do. Each
// envelope still carries its salt, so the receiver needs no per-stream setup
// message and Keyring.Open still opens every envelope on its own.

// nonceCounterLimit bounds the messages one stream key may seal. GCM with a
// counter nonce is safe far beyond this; rolling to a new salt well before
// 2^32 also bounds what one key ever protects.
const nonceCounterLimit = 1 << 32

// StreamSealer seals the messages of one stream under one derived key: a
// random salt drawn once, and nonces made of a random 4-byte prefix and a
// 64-bit counter, so no nonce repeats under the key. It follows Reload: the
// first Seal after a reload derives a fresh key from the new secret. Safe for
// concurrent use.
type StreamSealer struct {
	k    *Keyring
	tier Tier

	mu      sync.Mutex
	set     *keySet // the key set the current key came from
	sk      *secretKey
	salt    []byte
	aead    cipher.AEAD
	prefix  [4]byte
	counter uint64
}

// NewStreamSealer returns a sealer for one stream that seals with the
// current secret's key of tier t: the tier of the link the stream is on.
func (k *Keyring) NewStreamSealer(t Tier) *StreamSealer { return &StreamSealer{k: k, tier: t} }

// rekey derives a new stream key from the current secret. Caller holds mu.
func (s *StreamSealer) rekey(ks *keySet) error {
	if s.tier < TierWorker || s.tier > ks.top {
		return fmt.Errorf("stream seal as %s holding a %s key: %w", s.tier, ks.top, ErrNoTierKey)
	}
	send := ks.send[s.tier]
	fields := make([]byte, SaltSize+len(s.prefix))
	if _, err := rand.Read(fields); err != nil {
		return fmt.Errorf("stream seal with key %08x: read salt: %w", send.id, err)
	}
	aead, err := send.aead(fields[:SaltSize])
	if err != nil {
		return fmt.Errorf("stream seal with key %08x: %w", send.id, err)
	}
	s.set, s.sk, s.salt, s.aead = ks, send, fields[:SaltSize:SaltSize], aead
	copy(s.prefix[:], fields[SaltSize:])
	s.counter = 0
	return nil
}

// Seal is Keyring.Seal with the stream's key. The returned Salt is shared by
// every message of the key and must not be modified.
func (s *StreamSealer) Seal(dst, aad, plaintext []byte) (Sealed, error) {
	nonce := make([]byte, NonceSize)
	k, err := s.Next(nonce)
	if err != nil {
		return Sealed{}, err
	}
	return Sealed{KeyID: k.KeyID, Salt: k.Salt, Nonce: nonce, Ciphertext: k.Seal(dst, nonce, aad, plaintext)}, nil
}

// SealKey is the stream key one message is sealed with, handed out by Next
// together with that message's nonce.
type SealKey struct {
	KeyID uint32
	// Salt is shared by every message of the key; do not modify it.
	Salt []byte
	aead cipher.AEAD
}

// Seal appends the sealed plaintext (ciphertext and tag) to dst. nonce must
// be the one Next wrote for this key, used for this one message only.
func (k SealKey) Seal(dst, nonce, aad, plaintext []byte) []byte {
	return k.aead.Seal(dst, nonce, plaintext, aad)
}

// Next writes a fresh nonce into nonce (NonceSize bytes) and returns the key
// to seal one message with. Splitting Seal this way lets the transport write
// the envelope header, which carries the key id, salt and nonce, before the
// ciphertext into one buffer: no copy of the sealed body.
func (s *StreamSealer) Next(nonce []byte) (SealKey, error) {
	if len(nonce) != NonceSize {
		return SealKey{}, fmt.Errorf("stream seal: nonce buffer of %d bytes, want %d: %w", len(nonce), NonceSize, ErrBadSealedFields)
	}
	ks := s.k.keys.Load()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.set != ks || s.counter >= nonceCounterLimit {
		if err := s.rekey(ks); err != nil {
			return SealKey{}, err
		}
	}
	copy(nonce, s.prefix[:])
	binary.BigEndian.PutUint64(nonce[4:], s.counter)
	s.counter++
	return SealKey{KeyID: s.sk.id, Salt: s.salt, aead: s.aead}, nil
}

// StreamOpener opens the envelopes of one stream, remembering the key it
// derived for the last few salts so a stream sealed with a StreamSealer costs
// one derivation, not one per message. It accepts exactly what Keyring.Open
// accepts, including after a Reload drops a key. Safe for concurrent use.
type StreamOpener struct {
	k    *Keyring
	tier Tier

	mu    sync.Mutex
	cache [4]openerEntry // a stream changes salt only on rekey or reload
	next  int
}

type openerEntry struct {
	sk   *secretKey
	salt [SaltSize]byte
	aead cipher.AEAD
}

// NewStreamOpener returns an opener for one stream that opens only
// envelopes sealed with a tier-t key: the tier of the link the stream is on.
func (k *Keyring) NewStreamOpener(t Tier) *StreamOpener { return &StreamOpener{k: k, tier: t} }

// Open is Keyring.Open with a small cache of derived keys.
func (o *StreamOpener) Open(keyID uint32, salt, nonce, aad, ciphertext, dst []byte) ([]byte, error) {
	switch {
	case len(salt) != SaltSize:
		return nil, fmt.Errorf("open: salt is %d bytes, want %d: %w", len(salt), SaltSize, ErrBadSealedFields)
	case len(nonce) != NonceSize:
		return nil, fmt.Errorf("open: nonce is %d bytes, want %d: %w", len(nonce), NonceSize, ErrBadSealedFields)
	case len(ciphertext) < TagSize:
		return nil, fmt.Errorf("open: ciphertext is %d bytes, shorter than the %d-byte tag: %w", len(ciphertext), TagSize, ErrBadSealedFields)
	}
	ks := o.k.keys.Load()
	// Looking the key up in the current set on every call is what makes a
	// cached key stop working the moment a reload removes its secret.
	sk := ks.lookup(keyID)
	if sk == nil || sk.tier != o.tier {
		return nil, fmt.Errorf("open: %s key id %08x is not accepted (accepting %s): %w", o.tier, keyID, ks.idList(), ErrUnknownKey)
	}
	var saltKey [SaltSize]byte
	copy(saltKey[:], salt)
	aead := o.lookup(sk, saltKey)
	cached := aead != nil
	if !cached {
		var err error
		if aead, err = sk.aead(salt); err != nil {
			return nil, fmt.Errorf("open with key %08x: %w", keyID, err)
		}
	}
	out, err := aead.Open(dst, nonce, ciphertext, aad)
	if err != nil {
		return nil, fmt.Errorf("open with key %08x: %w", keyID, ErrAuthFailed)
	}
	if !cached {
		// Kept only once a message verified under it, so forged salts can
		// never push out the key the genuine sender is using.
		o.mu.Lock()
		o.cache[o.next] = openerEntry{sk: sk, salt: saltKey, aead: aead}
		o.next = (o.next + 1) % len(o.cache)
		o.mu.Unlock()
	}
	return out, nil
}

func (o *StreamOpener) lookup(sk *secretKey, salt [SaltSize]byte) cipher.AEAD {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, e := range o.cache {
		if e.sk == sk && e.salt == salt {
			return e.aead
		}
	}
	return nil
}
