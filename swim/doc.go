// Package swim is Tempest's membership layer: SWIM failure detection with
// Lifeguard's refinements, provided by hashicorp/memberlist, plus the few
// things Tempest adds on top of it.
//
// # What memberlist does and what this package adds
//
// memberlist already implements the protocol: round-robin UDP probes,
// indirect probes through k peers, a TCP fallback, suspicion with
// confirmations from independent peers (Lifeguard's dynamic suspicion
// timeout), the local health multiplier that slows a struggling node down
// instead of letting it accuse healthy peers (Lifeguard's LHM, exposed here
// as [Node.LocalHealth]), piggybacked gossip and periodic push/pull.
// This package wraps it so the roles (worker, manager, gate) see a small,
// Tempest-shaped API:
//
//   - [NodeMeta] (role, datacenter, QUIC address) rides in memberlist's node
//     metadata, encoded with the strict CBOR codec of package wire.
//   - A [StateEmbedder] puts a role's heartbeat into SWIM ack payloads and
//     receives the payloads its own probes collect (Serf-style state
//     embedding, see below).
//   - [EventHandler] callbacks for join, update and dead/left, delivered on a
//     goroutine the [Node] owns rather than on memberlist's.
//   - Named timing profiles ("lan", "local", "test") instead of scattered
//     constants; see [ProfileTiming].
//   - Gossip encryption keys that rotate at runtime ([Node.SetKeys]).
//   - A [VersionedClock] that lets a receiver drop heartbeats older than
//     one it has already applied.
//
// # Why state rides in acks
//
// Every node already answers a probe every probe interval; putting a few
// hundred bytes of heartbeat into that answer costs no extra packets, no
// extra connections and no extra timers, and the heartbeat arrives exactly
// when the prober has just learnt that the peer is alive. A worker's free
// cores, queue depth and CPU load therefore reach the managers that probe it
// without a separate reporting protocol. Payloads are capped at
// [MaxStateSize] so an ack still fits in one UDP datagram.
//
// The caveat, which roles must design around: memberlist hands an ack
// payload to the prober only for its own direct UDP probes (not for acks
// relayed by indirect probes or TCP fallback), and each node probes a single
// peer per probe interval in round-robin order. With N peers a given node's
// state therefore reaches a given prober about once every N probe intervals
// (N×200ms with the "test" profile, N×1s with "lan"). Acks are the passive
// channel for health and slowly changing state; numbers a scheduler needs
// now (free cores) must also travel on the data plane (dispatch acks,
// progress messages), and the manager updates its view optimistically on
// dispatch and completion. detect_test.go measures the staleness.
//
// # Callbacks and memberlist's goroutines
//
// memberlist calls its event delegate while holding its node-table lock, so
// a callback that blocked, or called back into memberlist, would stall or
// deadlock failure detection. Membership events are therefore queued
// without blocking and delivered in order on one goroutine owned by the
// [Node]; that goroutine stops on [Node.Shutdown], and no callback runs
// after Shutdown returns. [StateEmbedder] methods are the exception: they
// run inline on memberlist's packet and probe goroutines, because the ack
// payload must be produced while the ack is being sent, so they must be
// fast and must never block.
//
// Logging is queued the same way. memberlist writes log lines while holding
// its node-table lock (a refutation is logged before it is sent), and a
// write that blocked — stderr to a stalled reader, a log file on a busy
// disk — would silence the node's probes, acks and refutations until it
// returned, long enough for its peers to declare it dead. A Node's records,
// memberlist's and its own, go to [Config.Logger] from one goroutine the
// Node owns; when the sink falls behind by more than a thousand records the
// rest are dropped, and a warning says how many once it catches up.
// [Node.Shutdown] writes what is queued before it returns.
package swim
