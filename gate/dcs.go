package gate

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"tempest/swim"
	"tempest/wire"
)

// dcTable is what the gate knows of every datacenter: its managers, from
// SWIM membership (alive or not, QUIC address) and from the ManagerHeartbeats
// in SWIM acks (who leads, with how many workers and spare cores). It is a
// leaf: it never calls out while holding its lock.
type dcTable struct {
	now func() time.Time

	mu       sync.Mutex
	managers map[string]*managerEntry // by node id
	clock    *swim.VersionedClock
}

type managerEntry struct {
	id, dc, addr string
	alive        bool
	hb           wire.ManagerHeartbeat
	heardAt      time.Time // last heartbeat
}

func newDCTable(now func() time.Time) *dcTable {
	return &dcTable{now: now, managers: make(map[string]*managerEntry), clock: swim.NewVersionedClock(now)}
}

// member records a manager SWIM reports alive or gone.
func (t *dcTable) member(n swim.NodeInfo, alive bool) {
	if n.Meta.Role != wire.RoleManager || n.Meta.Datacenter == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.managers[n.Name]
	if !ok {
		e = &managerEntry{id: n.Name}
		t.managers[n.Name] = e
	}
	e.dc, e.alive = n.Meta.Datacenter, alive
	if n.Meta.QUICAddr != "" {
		e.addr = n.Meta.QUICAddr
	}
	if !alive {
		e.hb.IsLeader = false
	}
}

// heartbeat records a manager's heartbeat; older versions are ignored.
func (t *dcTable) heartbeat(hb *wire.ManagerHeartbeat) {
	if hb.Datacenter == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.clock.ShouldAccept(hb.NodeID, hb.Version) {
		return
	}
	e, ok := t.managers[hb.NodeID]
	if !ok {
		e = &managerEntry{id: hb.NodeID, alive: true}
		t.managers[hb.NodeID] = e
	}
	e.dc, e.hb, e.heardAt = hb.Datacenter, *hb, t.now()
	if hb.Addr != "" {
		e.addr = hb.Addr
	}
	if hb.IsLeader {
		// A leader's heartbeat outranks an older claim by a peer.
		for _, o := range t.managers {
			if o != e && o.dc == e.dc && o.hb.IsLeader && o.hb.Term < hb.Term {
				o.hb.IsLeader = false
			}
		}
	}
}

// answered records the heartbeat a manager sent in answer to a status
// request: proof that it is alive now, whatever SWIM last said.
func (t *dcTable) answered(hb *wire.ManagerHeartbeat) {
	t.heartbeat(hb)
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.managers[hb.NodeID]; ok && e.hb.Version == hb.Version {
		e.alive = true
	}
}

// dcHealth summarises one datacenter.
type dcHealth struct {
	Name           string
	Leader         string
	LeaderAddr     string
	Term           uint64
	Managers       int // alive
	Workers        int
	AvailableCores int
	Healthy        bool
	LastHeard      time.Time
}

// health reports every datacenter, sorted by name. A datacenter is healthy
// when it has a live manager that claims to lead and was heard within
// timeout.
func (t *dcTable) health(timeout time.Duration) []dcHealth {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	byDC := map[string]*dcHealth{}
	for _, e := range t.managers {
		h, ok := byDC[e.dc]
		if !ok {
			h = &dcHealth{Name: e.dc}
			byDC[e.dc] = h
		}
		if e.alive {
			h.Managers++
		}
		if e.heardAt.After(h.LastHeard) {
			h.LastHeard = e.heardAt
		}
		fresh := now.Sub(e.heardAt) <= timeout
		if e.alive && fresh && e.hb.IsLeader && e.hb.Term >= h.Term {
			h.Leader, h.LeaderAddr, h.Term = e.id, e.addr, e.hb.Term
			h.Workers, h.AvailableCores = e.hb.WorkerCount, e.hb.AvailableCores
			h.Healthy = true
		}
	}
	out := make([]dcHealth, 0, len(byDC))
	for _, h := range byDC {
		out = append(out, *h)
	}
	slices.SortFunc(out, func(a, b dcHealth) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// targets lists the QUIC addresses to try for dc: the leader first, then
// every other live manager (which answers NotLeader naming the leader).
func (t *dcTable) targets(dc string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var leader string
	var leaderTerm uint64
	var rest []string
	for _, e := range t.managers {
		if e.dc != dc || e.addr == "" || !e.alive {
			continue
		}
		if e.hb.IsLeader && (leader == "" || e.hb.Term > leaderTerm) {
			if leader != "" {
				rest = append(rest, leader)
			}
			leader, leaderTerm = e.addr, e.hb.Term
			continue
		}
		rest = append(rest, e.addr)
	}
	slices.Sort(rest)
	if leader != "" {
		return append([]string{leader}, rest...)
	}
	return rest
}

// all lists every manager the table knows (for the cluster view).
func (t *dcTable) all() []managerEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]managerEntry, 0, len(t.managers))
	for _, e := range t.managers {
		out = append(out, *e)
	}
	slices.SortFunc(out, func(a, b managerEntry) int { return cmp.Or(cmp.Compare(a.dc, b.dc), cmp.Compare(a.id, b.id)) })
	return out
}

// choose picks a job's datacenters: the named ones, which must be known and
// healthy, or the count healthiest (most spare cores, then name).
func chooseDatacenters(health []dcHealth, names []string, count int) ([]string, error) {
	byName := make(map[string]dcHealth, len(health))
	for _, h := range health {
		byName[h.Name] = h
	}
	if len(names) > 0 {
		for _, n := range names {
			h, ok := byName[n]
			switch {
			case !ok:
				return nil, wire.Errorf(wire.CodeRejected, "datacenter %q is unknown to this gate (known: %s)", n, knownNames(health))
			case !h.Healthy:
				return nil, wire.Errorf(wire.CodeUnavailable, "datacenter %q has no reachable leader right now", n)
			}
		}
		return slices.Clone(names), nil
	}
	count = max(count, 1)
	healthy := make([]dcHealth, 0, len(health))
	for _, h := range health {
		if h.Healthy {
			healthy = append(healthy, h)
		}
	}
	if len(healthy) < count {
		return nil, wire.Errorf(wire.CodeUnavailable, "the job asks for %d datacenters; %d are healthy (known: %s)", count, len(healthy), knownNames(health))
	}
	slices.SortFunc(healthy, func(a, b dcHealth) int {
		return cmp.Or(cmp.Compare(b.AvailableCores, a.AvailableCores), cmp.Compare(a.Name, b.Name))
	})
	out := make([]string, count)
	for i := range out {
		out[i] = healthy[i].Name
	}
	slices.Sort(out)
	return out, nil
}

func knownNames(health []dcHealth) string {
	if len(health) == 0 {
		return "none"
	}
	s := ""
	for i, h := range health {
		if i > 0 {
			s += ", "
		}
		s += h.Name
	}
	return s
}

// datacenterOf is the datacenter of manager id, "" when the gate has not
// heard of it.
func (t *dcTable) datacenterOf(id string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.managers[id]; ok {
		return e.dc
	}
	return ""
}
