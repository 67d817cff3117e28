// Package leadership elects one leader among the managers of a datacenter,
// and among the gates, using the election half of Raft with the two
// extensions etcd-raft relies on in production: pre-vote and check-quorum.
// There is no replicated log; what the rest of Tempest needs is "who leads,
// and is this command from a current leader?", which terms and fencing
// tokens answer.
//
// # Algorithm
//
// Time is counted in ticks. A follower that hears no leader heartbeat for a
// randomized timeout in [ElectionTicks, 2*ElectionTicks) becomes a
// pre-candidate and asks every member: "would you vote for me in term+1?"
// without changing its own term. Only with a majority of pre-votes does it
// become a candidate: it increments its term, votes for itself, persists
// both, and asks for real votes. A member grants at most one vote per term,
// and persists it before answering. A candidate with a majority of votes is
// leader; it heartbeats every HeartbeatTicks and counts the acks. Any
// message carrying a higher term turns its receiver into a follower of that
// term.
//
// A leader that has not heard acks from a majority within an election
// timeout steps down (check-quorum): on the far side of a partition it may
// already have been replaced, and it must not keep acting as leader. A leader
// cut off into a minority therefore stops leading within two election
// timeouts.
//
// # Why pre-vote
//
// Without it, a node that loses contact with the leader (an isolated
// follower, a flaky link, a node on the minority side of a partition) bumps
// its term on every timeout. When it reconnects, its inflated term forces
// the healthy leader to step down and the whole group to hold an election it
// did not need. With pre-vote the stranded node never gets a majority, so its
// term never moves. Members also refuse pre-votes while they still hear a
// live leader (the leader lease), so a node that merely cannot hear the
// leader cannot talk the others into replacing it.
//
// # Why quorum counts configured members
//
// Quorum is a majority of the configured membership (the Configuration in
// effect; Config.Peers until a change is stored), never of
// the members currently alive. In a partition each side sees the other as
// dead; if each counted only its living members, both sides would reach a
// "majority" and elect a leader: split brain. Two majorities of the same
// fixed set always share a member, and that member votes only once per term,
// so at most one leader per term can exist. The price is that a group with
// fewer than a majority alive has no leader, which is the correct answer.
//
// # Why term and vote are durable before anything is sent
//
// A node that votes, crashes, restarts with its vote forgotten and votes
// again in the same term can hand two candidates a majority each. So the
// Machine persists (term, votedFor) with fsync (BoltStorage) before it
// releases any vote, vote request or other message, and a restarted node
// resumes from that state. If persisting fails, the messages are dropped:
// elections tolerate loss, but not amnesia.
//
// # Fencing tokens
//
// A leader's fencing token is the term in which it was elected. Terms only
// grow, a term has at most one leader, and a leader elected after another
// had a strictly larger term, so tokens order leaders. Leadership can still
// overlap in time (a deposed leader learns of its replacement only when a
// message reaches it), which is why every leader-issued command carries the
// token and receivers reject tokens older than the newest they have seen for
// that scope: the overlap is harmless because the stale leader's commands
// bounce.
//
// # Health and flapping
//
// A node whose Lifeguard local health score (LHM) exceeds MaxLeaderLHM does
// not campaign, voters refuse to elect it, and a leader that degrades past
// the limit steps down. More than FlapMaxChanges leadership changes within
// FlapWindowTicks start a cooldown of FlapCooldownTicks during which the node
// starts no elections, so an unstable group settles instead of oscillating.
//
// # Planned handover, priority, membership changes
//
// A leader asked to stop hands over with TimeoutNow (TransferLeadership);
// Config.Priority ranks equally healthy candidates; and the member set is a
// Configuration changed one member at a time, in effect once a majority of
// the old set stored it. docs/leadership.md describes all three and why
// single-server changes rather than joint consensus.
//
// # Structure
//
// Machine (node.go) is the pure state machine: no goroutines, clock or I/O
// beyond Storage.Save, which makes it deterministic and lets sim_test.go run
// hundreds of seeded fault-injection scenarios per test run. Elector
// (driver.go) runs a Machine on a real clock over a transport.Transport and
// turns state changes into callbacks. Profile (profile.go) names the timing
// presets "lan", "local" and "test".
package leadership
