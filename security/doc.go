// Package security holds the cluster's shared-secret cryptography and the
// guards every node puts in front of its network inputs: the keyring that
// seals and opens envelopes, the replay guard, and per-source rate limits.
// It depends on no other Tempest package, so wire, transport and swim can all
// use it without cycles.
//
// # Sealing
//
// Every node holds AUTH_SECRET, or the key of its role derived from it (see
// Tier and DeriveRoleSecret: a worker host holds a key that derives nothing
// above it), and during a rotation AUTH_SECRET_PREVIOUS likewise. A message is
// sealed with AES-256-GCM under a key derived for that message alone:
// HKDF-SHA256(tier key, salt, "tempest envelope v1") with a fresh 16-byte
// random salt that travels beside the ciphertext; the tier is the lower of
// the two nodes' tiers, settled by the transport's connection hello. Deriving per message costs
// a few HMACs but buys two properties that matter more:
//
//   - Nonce reuse cannot happen. GCM breaks catastrophically if a nonce
//     repeats under one key, and a cluster has many senders, restarts and no
//     shared counter. With a fresh key per message, each key seals exactly one
//     message, so its random nonce cannot collide with another under it.
//   - The secret is never used as a cipher key directly, and there is no
//     per-key message budget to track or rotate on.
//
// The associated data (the envelope header: version, sender, type, id) is
// authenticated but not encrypted, so a receiver can route and rate-limit
// before it decrypts, and an attacker cannot move a body under another
// header.
//
// # Key ids
//
// Each secret has a 32-bit id, the first bytes of HMAC-SHA256 keyed by the
// secret over a fixed label. It is safe to log and show in `tempest cluster`:
// it lets two nodes compare which secret they hold without revealing it. (Like
// any sealed message, it would let an attacker test guesses of the secret
// offline, which is why short and guessable secrets are refused at start-up.)
// The id also lets Open try exactly one key: a peer on an unknown secret is
// turned away by a lookup, a forgery costs one derivation rather than one per
// accepted key, and "key id 1a2b3c4d is not accepted" in a log tells an
// operator which node is behind on a rotation.
//
// # Rotation
//
// Rotation follows Consul's keyring procedure, three passes over the nodes,
// each node reloading its secrets on SIGHUP (Keyring.Reload):
//
//  1. install: AUTH_SECRET=old, AUTH_SECRET_PREVIOUS=new. Every node still
//     sends with old but already accepts new.
//  2. use: AUTH_SECRET=new, AUTH_SECRET_PREVIOUS=old. Nodes send with new;
//     nodes not yet switched still accept it (pass 1), and switched nodes
//     still accept old from those not yet switched.
//  3. remove: AUTH_SECRET=new alone.
//
// At every moment of every pass, whatever one node sends, every other node
// accepts, so no message is refused during a rotation. Skipping the install
// pass is what breaks clusters: a node sending with new before its peers know
// it. memberlist's gossip keyring is derived from the same secrets
// (Keyring.MemberlistKeys) and so rotates in the same passes.
//
// # Guards
//
// ReplayGuard drops envelopes whose snowflake timestamp is outside a window
// around now, or whose (sender, id) it has already seen inside the window.
// Its memory is bounded; when full it forgets the oldest entries and from
// then on refuses anything that old, so it may refuse a fresh message under
// overload but never accepts a replay.
//
// RateLimiter is a token bucket per source and message class; the transport
// keys it by the node id a connection's hello proved (and, for new
// connections, by source IP). A refusal carries a retry-after so senders
// back off instead of losing work.
//
// # Proofs
//
// Keyring.Prove and VerifyProof are HMAC-SHA256 under a key derived from the
// secret (HKDF info "tempest connection proof v1"), with the key id of the
// secret, so they rotate exactly as envelopes do. The transport's connection
// hello proves the secret over a TLS exporter value with them; the API's
// followers vouch for a client's address with them.
package security
