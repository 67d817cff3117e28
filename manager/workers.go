package manager

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"tempest/rainstorm"
	"tempest/swim"
	"tempest/wire"
)

// workerTable is the manager's view of its datacenter's workers, fed by
// registrations, SWIM membership, heartbeats embedded in SWIM acks, dispatch
// acks and progress. Heartbeats reach a manager only about once every N probe
// intervals, so the table is also updated optimistically: cores are reserved
// while a placement is in flight, taken from the worker's own count in the
// dispatch ack, and given back when a workflow finishes. A later heartbeat
// supersedes any optimistic number.
//
// Every method takes mu and calls nothing outside the table.
type workerTable struct {
	mu        sync.Mutex
	rand      io.Reader // read only under mu
	softLimit int
	now       func() time.Time
	clock     *swim.VersionedClock // heartbeat versions per worker
	w         map[string]*workerEntry
}

type workerEntry struct {
	workerView
	// reserved counts cores promised to placements whose dispatch ack has
	// not arrived; they are not free even if a heartbeat says so.
	reserved int
}

// workerView is a copy of one worker's entry.
type workerView struct {
	ID             string
	Addr           string // QUIC
	SwimAddr       string
	Datacenter     string
	State          wire.WorkerState
	TotalCores     int
	AvailableCores int
	QueueDepth     int
	CPUPercent     float64
	MemoryPercent  float64
	Version        uint64
	Alive          bool
	// Gone: SWIM declared the worker dead and nothing has shown it alive
	// since. Unlike !Alive (which also covers "not heard from yet"), this
	// is evidence to act on.
	Gone       bool
	Registered bool
	LastSeen   time.Time
	// HeartbeatAt is when the newest heartbeat arrived, or one repeating
	// it (nothing changed): how fresh the scheduler's view of the worker is.
	HeartbeatAt time.Time
	// SendKeyID and AcceptKeyIDs are the worker's key ids from its last
	// heartbeat (zero and nil until one arrives), for `tempest cluster`.
	SendKeyID    uint32
	AcceptKeyIDs []uint32
	// Confinement is what the worker's config lets jobs make it do, from
	// its registration (confine.go); nil allows nothing.
	Confinement *wire.Confinement
}

func newWorkerTable(r io.Reader, softLimit int, now func() time.Time) *workerTable {
	return &workerTable{rand: r, softLimit: softLimit, now: now, clock: swim.NewVersionedClock(now), w: make(map[string]*workerEntry)}
}

func (t *workerTable) entry(id string) *workerEntry {
	e, ok := t.w[id]
	if !ok {
		e = &workerEntry{workerView: workerView{ID: id, State: wire.WorkerHealthy}}
		t.w[id] = e
	}
	return e
}

// register records a worker's registration. A registration starts a new
// incarnation (the process may have restarted and reset its version), so the
// heartbeat clock forgets the old one. Cores already running reported
// workflows are not free.
func (t *workerTable) register(reg *wire.WorkerRegistration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entry(reg.NodeID)
	t.clock.Forget(reg.NodeID)
	t.clock.Update(reg.NodeID, reg.Version)
	// Tasks of one pipeline slot report the same cores: count each once.
	held := map[int]bool{}
	for _, p := range reg.ActiveWorkflows {
		for _, c := range p.AssignedCores {
			held[c] = true
		}
	}
	busy := len(held)
	e.Addr = reg.Addr
	if reg.SwimAddr != "" {
		e.SwimAddr = reg.SwimAddr
	}
	e.Datacenter = reg.Datacenter
	e.Confinement = reg.Confinement
	e.TotalCores = reg.TotalCores
	e.AvailableCores = max(reg.TotalCores-busy, 0)
	e.Version = reg.Version
	e.State = wire.WorkerHealthy
	e.Alive = true
	e.Gone = false
	e.Registered = true
	e.reserved = 0
	e.LastSeen = t.now()
}

// heartbeat applies a heartbeat unless an equal or newer one was applied; a
// repeat of the applied one only says the view is still true, as of now.
// A pushed heartbeat is ignored for a worker SWIM declared dead. It reports
// whether the worker now has more free cores than before, which is the
// scheduler's cue to look at queued work.
func (t *workerTable) heartbeat(hb *wire.WorkerHeartbeat, swimAddr string) (applied, grew bool) {
	return t.mergeHeartbeat(hb, swimAddr, false)
}

// mergeHeartbeat is heartbeat for either channel; pushed: over QUIC.
func (t *workerTable) mergeHeartbeat(hb *wire.WorkerHeartbeat, swimAddr string, pushed bool) (applied, grew bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.w[hb.NodeID]; ok && e.Gone && pushed {
		return false, false
	}
	if !t.clock.ShouldAccept(hb.NodeID, hb.Version) {
		if e, ok := t.w[hb.NodeID]; ok && !e.Gone && e.Version == hb.Version {
			e.LastSeen = t.now()
			e.HeartbeatAt = e.LastSeen
		}
		return false, false
	}
	e := t.entry(hb.NodeID)
	before := e.AvailableCores
	if hb.Addr != "" {
		e.Addr = hb.Addr
	}
	if swimAddr != "" {
		e.SwimAddr = swimAddr
	}
	if hb.Datacenter != "" {
		e.Datacenter = hb.Datacenter
	}
	e.State = hb.State
	e.TotalCores = hb.TotalCores
	e.AvailableCores = hb.AvailableCores
	e.QueueDepth = hb.QueueDepth
	e.CPUPercent = hb.CPUPercent
	e.MemoryPercent = hb.MemoryPercent
	e.Version = hb.Version
	e.SendKeyID = hb.SendKeyID
	e.AcceptKeyIDs = slices.Clone(hb.AcceptKeyIDs)
	e.Alive = hb.State != wire.WorkerOffline
	e.Gone = false
	e.LastSeen = t.now()
	e.HeartbeatAt = e.LastSeen
	return true, e.AvailableCores > before
}

// snapshot applies a worker's state-sync answer, which is as fresh as a
// heartbeat and proves the worker alive.
func (t *workerTable) snapshot(ws *wire.WorkerStateSnapshot) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entry(ws.NodeID)
	if ws.Addr != "" {
		e.Addr = ws.Addr
	}
	if ws.Version != 0 {
		t.clock.Update(ws.NodeID, ws.Version)
		e.Version = max(e.Version, ws.Version)
	}
	if ws.State != "" {
		e.State = ws.State
	}
	e.TotalCores = ws.TotalCores
	e.AvailableCores = ws.AvailableCores
	e.Alive = ws.State != wire.WorkerOffline
	e.Gone = false
	e.LastSeen = t.now()
}

// learn adds a worker another manager knows about, without claiming it is
// alive: that is for SWIM, a registration or the worker's own answer to say.
func (t *workerTable) learn(ws *wire.WorkerStateSnapshot) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.w[ws.NodeID]; ok || ws.Addr == "" {
		return
	}
	e := t.entry(ws.NodeID)
	e.Addr = ws.Addr
	e.TotalCores = ws.TotalCores
	e.AvailableCores = ws.AvailableCores
	if ws.State != "" {
		e.State = ws.State
	}
}

// join marks a worker alive after SWIM reports it, reporting whether it was
// not alive before.
func (t *workerTable) join(id, quicAddr, swimAddr string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entry(id)
	if quicAddr != "" {
		e.Addr = quicAddr
	}
	if swimAddr != "" {
		e.SwimAddr = swimAddr
	}
	was := e.Alive
	e.Alive = true
	e.Gone = false
	e.LastSeen = t.now()
	return !was
}

// seen records that the worker just spoke to us (progress), which proves it
// alive whatever SWIM last said.
func (t *workerTable) seen(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.w[id]; ok {
		e.Alive, e.Gone = true, false
		e.LastSeen = t.now()
	}
}

// dead marks a worker gone, reporting whether it was alive. Its next
// incarnation may count versions from anywhere, so the clock forgets it.
func (t *workerTable) dead(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.w[id]
	if !ok {
		return false
	}
	t.clock.Forget(id)
	was := e.Alive
	e.Alive = false
	e.Gone = true
	e.reserved = 0
	return was
}

// dispatchable reports whether e may take a workflow of cores cores.
func (t *workerTable) dispatchable(e *workerEntry, cores int) bool {
	return takesWork(e) && e.AvailableCores-e.reserved >= cores && e.QueueDepth < t.softLimit
}

// takesWork reports whether e is a worker work may be placed on at all:
// alive, reachable, healthy or degraded.
func takesWork(e *workerEntry) bool {
	return e.Alive && e.Addr != "" && (e.State == wire.WorkerHealthy || e.State == wire.WorkerDegraded)
}

// pick chooses a dispatchable worker for cores cores, skipping excluded ones,
// and reserves the cores on it. Call unreserve, dispatched or rejected
// afterwards.
func (t *workerTable) pick(cores int, excluded func(id string) bool) (workerView, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var cands []candidate
	for id, e := range t.w {
		if (excluded != nil && excluded(id)) || !t.dispatchable(e, cores) {
			continue
		}
		cands = append(cands, candidate{id: id, spare: e.AvailableCores - e.reserved, degraded: e.State == wire.WorkerDegraded})
	}
	// Map order is random; sort so a seeded source gives repeatable picks.
	slices.SortFunc(cands, func(a, b candidate) int { return strings.Compare(a.id, b.id) })
	i, err := choose(t.rand, cands)
	if err != nil || i < 0 {
		return workerView{}, false
	}
	e := t.w[cands[i].id]
	e.reserved += cores
	return e.workerView, true
}

// unreserve gives back cores reserved by pick when the placement was
// abandoned before a worker answered.
func (t *workerTable) unreserve(id string, cores int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.w[id]; ok {
		e.reserved = max(e.reserved-cores, 0)
	}
}

// dispatched settles a reservation with the worker's answer: its own count
// of free cores after accepting (or refusing) is the freshest there is.
func (t *workerTable) dispatched(id string, cores, available int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.w[id]; ok {
		e.reserved = max(e.reserved-cores, 0)
		e.AvailableCores = available
		e.LastSeen = t.now()
	}
}

// freed gives cores back when a workflow on the worker ended, ahead of the
// heartbeat that will confirm it.
func (t *workerTable) freed(id string, cores int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.w[id]; ok {
		e.AvailableCores = min(e.AvailableCores+cores, e.TotalCores)
	}
}

// confirm is a peer's check of a placement the leader proposes (docs/datacenter.md):
// the worker is not known to be gone or refusing work, the leader's view of
// it is not older than ours where ours says it cannot take work, and the
// cores fit the machine at all. A worker this manager has not heard of yet
// is confirmed: membership reaches peers a gossip round later than a
// registration reaches the leader, and refusing would stall every fresh
// worker for that round.
func (t *workerTable) confirm(id string, cores int, version uint64) (bool, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.w[id]
	if !ok {
		return true, ""
	}
	switch {
	case e.Gone:
		return false, fmt.Sprintf("worker %s is dead", id)
	case e.Version > version && (e.State == wire.WorkerDraining || e.State == wire.WorkerOffline):
		return false, fmt.Sprintf("worker %s is %s (version %d, newer than %d)", id, e.State, e.Version, version)
	case e.TotalCores > 0 && cores > e.TotalCores:
		return false, fmt.Sprintf("worker %s has %d cores, %d requested", id, e.TotalCores, cores)
	}
	return true, ""
}

func (t *workerTable) get(id string) (workerView, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.w[id]
	if !ok {
		return workerView{}, false
	}
	return e.workerView, true
}

// list returns every worker, sorted by id.
func (t *workerTable) list() []workerView {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]workerView, 0, len(t.w))
	for _, e := range t.w {
		out = append(out, e.workerView)
	}
	slices.SortFunc(out, func(a, b workerView) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// totals counts alive workers and their free cores.
func (t *workerTable) totals() (alive, available int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.w {
		if e.Alive {
			alive++
			available += max(e.AvailableCores-e.reserved, 0)
		}
	}
	return alive, available
}

// registeredCores counts the live workers whose cores the table knows
// (from their registration, a heartbeat or their state-sync answer: a new
// leader knows a worker's cores before the worker registers with it
// again), in any state, since a draining or degraded worker may take work
// again; and their cores.
func (t *workerTable) registeredCores() (workers, cores int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.w {
		if e.Alive && !e.Gone && e.TotalCores > 0 {
			workers++
			cores += e.TotalCores
		}
	}
	return workers, cores
}

// cleanup forgets heartbeat versions of workers not heard from for age.
func (t *workerTable) cleanup(age time.Duration) { t.clock.CleanupOlderThan(age) }

// managerTable is what this manager knows of its peers from SWIM and their
// embedded heartbeats. It is display and diagnosis only: quorum is always
// counted over the configured peers.
type managerTable struct {
	mu    sync.Mutex
	now   func() time.Time
	clock *swim.VersionedClock
	m     map[string]*managerEntry
}

type managerEntry struct {
	hb       wire.ManagerHeartbeat
	alive    bool
	lastSeen time.Time
}

func newManagerTable(now func() time.Time) *managerTable {
	return &managerTable{now: now, clock: swim.NewVersionedClock(now), m: make(map[string]*managerEntry)}
}

func (t *managerTable) alive(id string, alive bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.m[id]
	if !ok {
		e = &managerEntry{hb: wire.ManagerHeartbeat{NodeID: id}}
		t.m[id] = e
	}
	if !alive {
		t.clock.Forget(id)
	}
	e.alive = alive
	e.lastSeen = t.now()
}

func (t *managerTable) heartbeat(hb *wire.ManagerHeartbeat) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.clock.ShouldAccept(hb.NodeID, hb.Version) {
		return
	}
	e, ok := t.m[hb.NodeID]
	if !ok {
		e = &managerEntry{}
		t.m[hb.NodeID] = e
	}
	e.hb = *hb
	e.alive = true
	e.lastSeen = t.now()
}

func (t *managerTable) get(id string) (wire.ManagerHeartbeat, bool, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.m[id]
	if !ok {
		return wire.ManagerHeartbeat{}, false, false
	}
	return e.hb, e.alive, true
}

// gangDemand is one task of a pipeline placed whole: its cores and the
// workers it must not go to.
type gangDemand struct {
	cores    int
	excluded []string
	// needs: only a worker whose confinement allows all of them.
	needs []rainstorm.Need
}

// reserveAll reserves cores for every demand at once, or for none: a
// pipeline's tasks wait on one another, so a pipeline holding only part of
// the cores it needs holds them for nothing (gang.go). Each demand gets a
// worker drawn like pick does, one the pipeline does not use yet where
// there is such a worker with room. The answer is in demands' order.
func (t *workerTable) reserveAll(demands []gangDemand) ([]workerView, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	spare := map[string]int{}
	var ids []string
	for id, e := range t.w {
		if t.dispatchable(e, 1) {
			spare[id] = e.AvailableCores - e.reserved
			ids = append(ids, id)
		}
	}
	slices.Sort(ids) // map order is random; a seeded source repeats
	// Larger tasks first: they are the hard ones to fit.
	order := make([]int, len(demands))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return demands[b].cores - demands[a].cores })
	chosen := make([]string, len(demands))
	used := map[string]bool{}
	for _, i := range order {
		d := demands[i]
		var fresh, all []candidate
		for _, id := range ids {
			if spare[id] < d.cores || slices.Contains(d.excluded, id) || !permitsAll(t.w[id].Confinement, d.needs) {
				continue
			}
			c := candidate{id: id, spare: spare[id], degraded: t.w[id].State == wire.WorkerDegraded}
			all = append(all, c)
			if !used[id] {
				fresh = append(fresh, c)
			}
		}
		cands := fresh
		if len(cands) == 0 {
			cands = all
		}
		k, err := choose(t.rand, cands)
		if err != nil || k < 0 {
			return nil, false
		}
		id := cands[k].id
		chosen[i] = id
		spare[id] -= d.cores
		used[id] = true
	}
	out := make([]workerView, len(demands))
	for i, id := range chosen {
		e := t.w[id]
		e.reserved += demands[i].cores
		out[i] = e.workerView
	}
	return out, true
}

// capacity counts the cores of the workers that take work (alive, healthy
// or degraded), how many of them are free and not promised, and the cores
// of the largest such worker.
func (t *workerTable) capacity() (total, free, largest int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.w {
		if takesWork(e) {
			total += e.TotalCores
			largest = max(largest, e.TotalCores)
			if e.QueueDepth < t.softLimit {
				free += max(e.AvailableCores-e.reserved, 0)
			}
		}
	}
	return total, free, largest
}
