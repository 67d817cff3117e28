package security

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"golang.org/x/crypto/hkdf"
)

// Sizes of the sealed fields that travel in an envelope.
const (
	SaltSize  = 16 // random per message; input to HKDF
	NonceSize = 12 // AES-GCM standard nonce
	TagSize   = 16 // AES-GCM tag, appended to the ciphertext
)

const (
	keySize = 32 // AES-256 and memberlist's AES-256 keyring
	// The HKDF info strings separate the key families derived from one
	// secret, so an envelope key can never equal a gossip key. They are
	// versioned: changing one is a wire-incompatible change.
	envelopeInfo   = "tempest envelope v1"
	memberlistInfo = "tempest memberlist keyring v1"
	resetInfo      = "tempest quic stateless reset v1 "
	proofInfo      = "tempest connection proof v1"
)

// Errors from Open. They are returned wrapped with context; test with
// errors.Is.
var (
	// ErrUnknownKey: the envelope names a key id this node does not accept,
	// usually a peer on the other side of an incomplete rotation.
	ErrUnknownKey = errors.New("unknown key id")
	// ErrAuthFailed: the GCM tag did not verify. The sender does not hold the
	// secret its key id names, or the envelope was altered.
	ErrAuthFailed = errors.New("message authentication failed")
	// ErrBadSealedFields: salt, nonce or ciphertext has an impossible length,
	// so the envelope is malformed before any cryptography runs.
	ErrBadSealedFields = errors.New("malformed sealed fields")
)

// Sealed is one sealed message: everything the receiver needs besides the
// associated data, which it rebuilds from the envelope header.
type Sealed struct {
	KeyID uint32
	Salt  []byte // SaltSize bytes
	Nonce []byte // NonceSize bytes
	// Ciphertext is dst from Seal with the ciphertext and tag appended, in
	// the manner of append and cipher.AEAD.Seal.
	Ciphertext []byte
}

// Keyring seals with the current secret and opens with the current or the
// previous one. It is safe for concurrent use, including Reload during
// Seal and Open. Build one with NewKeyring; the zero value holds no keys.
type Keyring struct {
	// keys is swapped whole by Reload and never mutated after publication,
	// so readers need no lock and each call sees one consistent set.
	keys atomic.Pointer[keySet]
}

// keySet is immutable once built.
type keySet struct {
	// top is the highest tier the current secret holds.
	top Tier
	// send holds the current secret's key of each tier up to top.
	send [numTiers]*secretKey
	// accept holds every tier's key of the current, then the previous,
	// secret; ids are unique across it.
	accept []*secretKey
	// display is the cluster key id of the current, then the previous,
	// secret: what logs and `tempest cluster` show.
	display []uint32
	// gossip holds memberlist keys, current first (see MemberlistKeys).
	gossip [][]byte
}

type secretKey struct {
	id     uint32 // names this tier key in envelopes and hellos
	tier   Tier
	secret []byte
	proof  []byte // keySize bytes: HMAC key for proofs
}

// NewKeyring builds a keyring that sends with current and accepts current
// and, unless empty, previous. Each is AUTH_SECRET itself (checked with
// ValidateSecret) or a role secret from DeriveRoleSecret; errors name
// AUTH_SECRET or AUTH_SECRET_PREVIOUS so an operator knows which to fix.
func NewKeyring(current, previous string) (*Keyring, error) {
	ks, err := newKeySet(current, previous)
	if err != nil {
		return nil, fmt.Errorf("load keyring: %w", err)
	}
	k := &Keyring{}
	k.keys.Store(ks)
	return k, nil
}

// Reload replaces the secrets, as on SIGHUP during a rotation. Seal and Open
// calls in flight finish with the set they started with. If the new secrets
// are refused the keyring keeps its current ones and returns the error.
func (k *Keyring) Reload(current, previous string) error {
	ks, err := newKeySet(current, previous)
	if err != nil {
		return fmt.Errorf("reload keyring: %w", err)
	}
	k.keys.Store(ks)
	return nil
}

func newKeySet(current, previous string) (*keySet, error) {
	cur, err := parseSecret("AUTH_SECRET", current)
	if err != nil {
		return nil, err
	}
	ks := &keySet{top: cur.tier}
	curKeys, err := ks.add(cur)
	if err != nil {
		return nil, err
	}
	for t := TierWorker; t <= cur.tier; t++ {
		ks.send[t] = curKeys[t]
	}
	// Setting both to the same value is harmless (an operator may do it
	// mid-rotation); keep one copy so key ids stay unique.
	if previous == "" || previous == current {
		return ks, nil
	}
	prev, err := parseSecret("AUTH_SECRET_PREVIOUS", previous)
	if err != nil {
		return nil, err
	}
	if _, err := ks.add(prev); err != nil {
		return nil, err
	}
	return ks, nil
}

// add derives every tier key of ts into the set.
func (ks *keySet) add(ts tierSecret) ([numTiers]*secretKey, error) {
	var out [numTiers]*secretKey
	raw, err := ts.chain()
	if err != nil {
		return out, err
	}
	for t := ts.tier; t >= TierWorker; t-- {
		sk, err := newSecretKey(raw[t], t)
		if err != nil {
			return out, err
		}
		if ks.lookup(sk.id) != nil {
			// Open picks a key by id alone, so two keys with one id would
			// make one of them unusable. A 1-in-2^32 accident (or the same
			// secret given twice in different forms); a new secret fixes it.
			return out, fmt.Errorf("AUTH_SECRET and AUTH_SECRET_PREVIOUS differ but share key id %08x; generate a new AUTH_SECRET", sk.id)
		}
		ks.accept = append(ks.accept, sk)
		out[t] = sk
	}
	gossip := make([]byte, keySize)
	if _, err := io.ReadFull(hkdf.New(sha256.New, raw[TierWorker], nil, []byte(memberlistInfo)), gossip); err != nil {
		return out, fmt.Errorf("derive memberlist key for %08x: %w", ts.display, err)
	}
	ks.display = append(ks.display, ts.display)
	ks.gossip = append(ks.gossip, gossip)
	return out, nil
}

func newSecretKey(secret []byte, tier Tier) (*secretKey, error) {
	sk := &secretKey{secret: secret, tier: tier, proof: make([]byte, keySize)}
	sk.id = keyID(sk.secret)
	if _, err := io.ReadFull(hkdf.New(sha256.New, sk.secret, nil, []byte(proofInfo)), sk.proof); err != nil {
		return nil, fmt.Errorf("derive proof key for %08x: %w", sk.id, err)
	}
	return sk, nil
}

// Tier is the highest tier the current secret holds: TierCluster for
// AUTH_SECRET itself, lower for a role secret.
func (k *Keyring) Tier() Tier { return k.keys.Load().top }

// StatelessResetKey derives node's QUIC stateless reset key from the secret
// it sends with. A node restarted after a crash derives the same key, so it
// can answer a peer's packets for a connection it no longer has with a
// stateless reset the peer trusts, and the peer drops that connection at
// once instead of after its idle timeout. A node restarted with a new
// secret cannot; its peers then wait for the idle timeout, as without a
// key. The key is secret: it lets its holder reset the node's connections.
func (k *Keyring) StatelessResetKey(node string) ([32]byte, error) {
	var key [32]byte
	ks := k.keys.Load()
	sk := ks.send[ks.top]
	if _, err := io.ReadFull(hkdf.New(sha256.New, sk.secret, nil, []byte(resetInfo+node)), key[:]); err != nil {
		return key, fmt.Errorf("derive stateless reset key: %w", err)
	}
	return key, nil
}

// ProofSize is the length of a connection proof.
const ProofSize = sha256.Size

// ErrNoTierKey: the keyring holds no key of the tier asked for (a worker
// key cannot prove or seal as a manager).
var ErrNoTierKey = errors.New("no key of that tier")

// Prove returns an HMAC-SHA256 over transcript under a key derived from the
// current secret's key of tier t, and that key's id. The transport uses it
// for the hello that opens every connection: the transcript names the TLS
// session (an exporter value), so a proof cannot be replayed on another
// connection, and a relay in the middle, which holds two TLS sessions,
// cannot forward one.
func (k *Keyring) Prove(t Tier, transcript []byte) (keyID uint32, proof []byte, err error) {
	ks := k.keys.Load()
	if t < TierWorker || t > ks.top {
		return 0, nil, fmt.Errorf("prove as %s holding a %s key: %w", t, ks.top, ErrNoTierKey)
	}
	sk := ks.send[t]
	m := hmac.New(sha256.New, sk.proof)
	m.Write(transcript)
	return sk.id, m.Sum(nil), nil
}

// VerifyProof checks a proof made by Prove with the accepted tier-t key
// named by keyID, in constant time. Errors wrap ErrUnknownKey (no accepted
// key of that id and tier) or ErrAuthFailed.
func (k *Keyring) VerifyProof(t Tier, keyID uint32, transcript, proof []byte) error {
	ks := k.keys.Load()
	sk := ks.lookup(keyID)
	if sk == nil || sk.tier != t {
		return fmt.Errorf("proof: %s key id %08x is not accepted (accepting %s): %w", t, keyID, ks.idList(), ErrUnknownKey)
	}
	m := hmac.New(sha256.New, sk.proof)
	m.Write(transcript)
	if !hmac.Equal(m.Sum(nil), proof) {
		return fmt.Errorf("proof with key %08x: %w", keyID, ErrAuthFailed)
	}
	return nil
}

// SendKeyID is the cluster key id of the secret this node sends with: the
// id of AUTH_SECRET, or of the AUTH_SECRET a role secret was derived from,
// so every node of a cluster shows the same id whatever its role.
func (k *Keyring) SendKeyID() uint32 {
	return k.keys.Load().display[0]
}

// AcceptedKeyIDs lists the cluster key ids of the secrets this node
// accepts, the sending one first.
func (k *Keyring) AcceptedKeyIDs() []uint32 {
	return append([]uint32(nil), k.keys.Load().display...)
}

// MemberlistKeys returns 32-byte keys for memberlist's gossip keyring,
// derived from the accepted secrets' worker keys (workers gossip too),
// current first: memberlist encrypts with the first and decrypts with any,
// which matches how envelopes rotate. The slices are fresh copies.
func (k *Keyring) MemberlistKeys() [][]byte {
	ks := k.keys.Load()
	keys := make([][]byte, len(ks.gossip))
	for i, g := range ks.gossip {
		keys[i] = append([]byte(nil), g...)
	}
	return keys
}

// Seal encrypts plaintext with the current secret and authenticates aad with
// it. The ciphertext and tag are appended to dst (pass nil, or buf[:0] to
// reuse a buffer; plaintext[:0] seals in place); salt and nonce are fresh
// from crypto/rand.
func (k *Keyring) Seal(dst, aad, plaintext []byte) (Sealed, error) {
	ks := k.keys.Load()
	sk := ks.send[ks.top]
	// One allocation for both fields; they are handed to the caller.
	fields := make([]byte, SaltSize+NonceSize)
	if _, err := rand.Read(fields); err != nil {
		return Sealed{}, fmt.Errorf("seal with key %08x: read salt and nonce: %w", sk.id, err)
	}
	salt, nonce := fields[:SaltSize:SaltSize], fields[SaltSize:]
	aead, err := sk.aead(salt)
	if err != nil {
		return Sealed{}, fmt.Errorf("seal with key %08x: %w", sk.id, err)
	}
	// The key is derived from a fresh random salt, so it seals this message
	// and no other: a nonce can never repeat under one key, whatever the
	// number of senders, restarts or messages. The nonce is still random
	// rather than zero so that a salt collision (2^-128 per pair) would
	// also need a nonce collision to do harm.
	ct := aead.Seal(dst, nonce, plaintext, aad)
	return Sealed{KeyID: sk.id, Salt: salt, Nonce: nonce, Ciphertext: ct}, nil
}

// Open checks and decrypts a message sealed by a holder of the secret named
// by keyID, appending the plaintext to dst (ciphertext[:0] opens in place;
// other overlaps are not allowed, as with cipher.AEAD). Only the key whose id
// matches is tried. Errors wrap ErrBadSealedFields, ErrUnknownKey or
// ErrAuthFailed; dst is not returned on error.
func (k *Keyring) Open(keyID uint32, salt, nonce, aad, ciphertext, dst []byte) ([]byte, error) {
	switch {
	case len(salt) != SaltSize:
		return nil, fmt.Errorf("open: salt is %d bytes, want %d: %w", len(salt), SaltSize, ErrBadSealedFields)
	case len(nonce) != NonceSize:
		return nil, fmt.Errorf("open: nonce is %d bytes, want %d: %w", len(nonce), NonceSize, ErrBadSealedFields)
	case len(ciphertext) < TagSize:
		return nil, fmt.Errorf("open: ciphertext is %d bytes, shorter than the %d-byte tag: %w", len(ciphertext), TagSize, ErrBadSealedFields)
	}
	ks := k.keys.Load()
	sk := ks.lookup(keyID)
	if sk == nil {
		return nil, fmt.Errorf("open: key id %08x is not accepted (accepting %s): %w", keyID, ks.idList(), ErrUnknownKey)
	}
	aead, err := sk.aead(salt)
	if err != nil {
		return nil, fmt.Errorf("open with key %08x: %w", keyID, err)
	}
	out, err := aead.Open(dst, nonce, ciphertext, aad)
	if err != nil {
		return nil, fmt.Errorf("open with key %08x: %w", keyID, ErrAuthFailed)
	}
	return out, nil
}

func (ks *keySet) lookup(id uint32) *secretKey {
	for _, sk := range ks.accept {
		if sk.id == id {
			return sk
		}
	}
	return nil
}

func (ks *keySet) idList() string {
	s := ""
	for i, sk := range ks.accept {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%08x", sk.id)
	}
	return s
}

// aead derives this message's key from the secret and salt.
func (sk *secretKey) aead(salt []byte) (cipher.AEAD, error) {
	var key [keySize]byte
	if _, err := io.ReadFull(hkdf.New(sha256.New, sk.secret, salt, []byte(envelopeInfo)), key[:]); err != nil {
		return nil, fmt.Errorf("derive message key: %w", err)
	}
	block, err := aes.NewCipher(key[:])
	if err != nil {
		return nil, fmt.Errorf("aes: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("gcm: %w", err)
	}
	return aead, nil
}
