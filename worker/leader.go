package worker

import (
	"net"
	"slices"
	"sync"
)

// leaderTracker is the worker's belief about which manager leads its
// datacenter, and the manager addresses it has learnt. Sources, any of which
// may update it: RegistrationAck, ProgressAck.Leader, NotLeader error
// replies, ManagerHeartbeats probed over SWIM, a StateSyncRequest from a
// newly elected leader, and SWIM membership (manager id → QUIC address).
//
// Its mutex is a leaf: never held while taking Worker.mu or calling out.
type leaderTracker struct {
	mu   sync.Mutex
	id   string
	addr string
	term uint64
	// managers maps manager node id → QUIC address, so a leader named by id
	// alone (ProgressAck.Leader, ManagerHeartbeat.LeaderID) can be reached.
	managers map[string]string
	// learnt holds manager addresses from RegistrationAck.Managers, tried
	// after the configured ones when registering.
	learnt []string
	// changed is closed and replaced whenever the leader changes, waking
	// final-progress senders that are backing off.
	changed chan struct{}
	// failures counts consecutive failed calls to the current leader.
	failures int
}

func newLeaderTracker() *leaderTracker {
	return &leaderTracker{managers: make(map[string]string), changed: make(chan struct{})}
}

// current returns the leader's id ("" if unknown even when the address is
// known) and address ("" when no manager is believed to lead).
func (t *leaderTracker) current() (id, addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.id, t.addr
}

// knownTerm is the newest manager election term the worker has seen a
// leader claim.
func (t *leaderTracker) knownTerm() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.term
}

// changedCh returns a channel closed at the next leader change.
func (t *leaderTracker) changedCh() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.changed
}

// set makes (id, addr) the leader. term 0 means the source does not know
// the term; otherwise a claim from an older term than the one believed is
// ignored, so a deposed leader's heartbeat still in flight cannot pull the
// worker back. It reports whether the leader changed.
func (t *leaderTracker) set(id, addr string, term uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.setLocked(id, addr, term)
}

// adoptNewTerm makes (id, addr) the leader only if term is newer than the
// one believed (or none is known): for claims implied rather than stated,
// such as a manager of a newer term asking for state sync.
func (t *leaderTracker) adoptNewTerm(id, addr string, term uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if term == 0 || (t.term != 0 && term <= t.term) {
		return false
	}
	return t.setLocked(id, addr, term)
}

func (t *leaderTracker) setLocked(id, addr string, term uint64) bool {
	if addr == "" || (term != 0 && term < t.term) {
		return false
	}
	if id != "" {
		t.managers[id] = addr
	}
	t.term = max(t.term, term)
	if t.addr == addr && (id == "" || t.id == id) {
		return false
	}
	t.id, t.addr = id, addr
	t.failures = 0
	close(t.changed)
	t.changed = make(chan struct{})
	return true
}

// setByID makes the manager named id the leader, if its address can be
// resolved. It reports whether the leader changed and whether id resolved.
func (t *leaderTracker) setByID(id string, term uint64) (changed, resolved bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	addr := t.resolveLocked(id)
	if addr == "" {
		return false, false
	}
	return t.setLocked(id, addr, term), true
}

// isLeader reports whether id names the believed leader, by id or by
// address.
func (t *leaderTracker) isLeader(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return id != "" && t.addr != "" && (id == t.id || t.resolveLocked(id) == t.addr)
}

// resolveLocked returns the address of manager id: learnt from SWIM or
// registration, or id itself when it already is a host:port (some replies
// name the leader by address).
func (t *leaderTracker) resolveLocked(id string) string {
	if id == "" {
		return ""
	}
	if addr, ok := t.managers[id]; ok {
		return addr
	}
	if _, _, err := net.SplitHostPort(id); err == nil {
		return id
	}
	return ""
}

// learn records a manager's address.
func (t *leaderTracker) learn(id, addr string) {
	if id == "" || addr == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.managers[id] = addr
}

// learnAddrs records manager addresses named by a RegistrationAck.
func (t *leaderTracker) learnAddrs(addrs []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, a := range addrs {
		if a != "" && !slices.Contains(t.learnt, a) {
			t.learnt = append(t.learnt, a)
		}
	}
}

// knownAddrs returns every manager address learnt so far.
func (t *leaderTracker) knownAddrs() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := slices.Clone(t.learnt)
	for _, a := range t.managers {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	slices.Sort(out[len(t.learnt):])
	return out
}

// lost forgets the leader if it is at addr (it died or stopped answering),
// and reports whether it was.
func (t *leaderTracker) lost(addr string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if addr == "" || t.addr != addr {
		return false
	}
	t.id, t.addr = "", ""
	t.failures = 0
	close(t.changed)
	t.changed = make(chan struct{})
	return true
}

// callFailed counts a failed call to addr and reports whether the failures
// in a row to the current leader reached limit, at which point the caller
// should fail over.
func (t *leaderTracker) callFailed(addr string, limit int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if addr == "" || addr != t.addr {
		return false
	}
	t.failures++
	return t.failures >= limit
}

// callSucceeded resets the failure count for addr.
func (t *leaderTracker) callSucceeded(addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if addr == t.addr {
		t.failures = 0
	}
}
