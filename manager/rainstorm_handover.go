package manager

import (
	"log/slog"
	"time"

	"tempest/rainstorm"
	"tempest/rainstorm/ckpt"
	"tempest/rsstore"
	"tempest/wire"
)

// Handovers of a resize (docs/rainstorm.md, "Resizing a running
// pipeline"): a task entering an epoch in which it gains key groups asks,
// in its route requests, for the groups each old owner gave away when it
// closed the epoch before. The leader answers from the old owner's
// durable closing checkpoint, and only with the groups that go to tasks
// the asking worker runs: as a task's own state is served only to the
// worker it is dispatched to (its open), a handed-over group is served
// only to the worker of the task that gains it. A stage's moving state
// can outgrow a message, so an answer is a page (rsHandoverRead).

// rsHandoverBudget bounds the state bytes the handovers of one route
// answer carry: a quarter of the largest message, leaving room for the
// routes and the encoding's overhead (the store's entry sizes
// overestimate).
const rsHandoverBudget = wire.MaxMessageSize / 4

// rsHandovers answers node's handover requests for pipeline (job, wf):
// for each want whose old owner's closing checkpoint is durable, a page
// of at most budget bytes (give or take one entry) of the groups it gave
// to node's tasks. A want left out (not durable yet, nothing for node, or
// past the budget) is asked again with the worker's next route request.
func (m *Manager) rsHandovers(node, job, wf string, spec *rainstorm.Spec, wants []wire.RainstormHandoverWant, budget int) []wire.RainstormHandover {
	if len(wants) == 0 || spec == nil || !spec.Resizable() {
		return nil
	}
	_, order, infos := m.rsTasks(job, wf)
	mine := map[wire.RainstormTask]bool{}
	for i, t := range order {
		if i < len(infos) && infos[i].found && infos[i].worker == node && infos[i].running() {
			mine[wire.RainstormTask{Stage: t.Stage, Index: t.Index}] = true
		}
	}
	epochs, _, _ := rsEpochsOf(spec, m.rs.Head(wire.RainstormTask{Job: job, Workflow: wf}))
	tabs, err := rainstorm.NewTables(epochs)
	if err != nil {
		return nil
	}
	key := rsPipeKey{job, wf}
	now := m.clock.Now()
	var out []wire.RainstormHandover
	for _, h := range wants {
		if budget <= 0 {
			break
		}
		if h.Stage < 1 || h.Stage > len(spec.Stages) || int(h.Epoch)+1 >= tabs.Len() {
			continue
		}
		// Only what the old owner held in the epoch and gives to a task
		// node runs: its state may also hold groups it gave away earlier
		// (stale, never read again), and groups other workers' tasks gain.
		was, next := tabs.Table(int(h.Epoch), h.Stage), tabs.Table(int(h.Epoch)+1, h.Stage)
		take := func(g int) bool {
			return g >= 0 && g < len(next) && was[g] == h.Index && next[g] != h.Index &&
				mine[wire.RainstormTask{Stage: h.Stage, Index: next[g]}]
		}
		if !rsAnyGroup(len(next), take) {
			continue // nothing of it goes to node: its state is not read
		}
		stage := spec.Stages[h.Stage-1].Name
		m.rsScale.handoverAsked(key, stage, h.Epoch+1, now)
		page, used, ok := rsHandoverRead(m.rs, wire.RainstormTask{Job: job, Workflow: wf, Stage: h.Stage, Index: h.Index}, h, take, budget)
		if !ok {
			continue
		}
		budget -= used
		out = append(out, page)
		var served []int // whole once the last page is out, keys or none
		if !page.More {
			for g := range len(next) {
				if take(g) {
					served = append(served, g)
				}
			}
		}
		m.rsScale.handedOver(key, stage, h.Epoch+1, rsMovedGroups(was, next), page, served, now, m.log)
	}
	return out
}

// rsHandoverRead cuts the page of want h from old owner old's state in
// rs: the groups take accepts, in group order, from the want's position
// on, as many entries as fit budget bytes (at least one, so a huge entry
// still moves). It returns the page and the bytes it counted, or false
// while the old owner's closing checkpoint of the want's epoch is not
// durable. The page is cut from the state's B-tree at the position, so it
// costs its own entries, not the old owner's whole state.
func rsHandoverRead(rs *rsstore.Store, old wire.RainstormTask, h wire.RainstormHandoverWant, take func(int) bool, budget int) (wire.RainstormHandover, int, bool) {
	if _, ok := rainstorm.HandoverOf(rs.Head(old), h.Epoch); !ok {
		// Not durable yet: asked again on every route refresh until it
		// is, so no page is cut to be thrown away.
		return wire.RainstormHandover{}, 0, false
	}
	sp := rs.ReadState(old, rsstore.StatePos{Group: h.FromGroup, Entry: h.FromEntry}, take, budget)
	if _, ok := rainstorm.HandoverOf(sp.Head, h.Epoch); !ok { // the head the page was cut from
		return wire.RainstormHandover{}, 0, false
	}
	page := wire.RainstormHandover{Stage: h.Stage, Index: h.Index, Epoch: h.Epoch, FromGroup: h.FromGroup, FromEntry: h.FromEntry,
		Groups: sp.Groups, More: sp.More}
	if sp.More {
		page.NextGroup, page.NextEntry = sp.Next.Group, sp.Next.Entry
	}
	return page, sp.Bytes, true
}

// rsAnyGroup reports whether take accepts any of groups 0..n-1.
func rsAnyGroup(n int, take func(int) bool) bool {
	for g := range n {
		if take(g) {
			return true
		}
	}
	return false
}

// rsMovedGroups counts the groups whose owner differs between two tables
// of a stage.
func rsMovedGroups(was, next rainstorm.GroupTable) int {
	n := 0
	for g := range min(len(was), len(next)) {
		if was[g] != next[g] {
			n++
		}
	}
	return n
}

// rsHandoverStat is what the leader saw of one resize's handovers: when
// the first was asked for, the group parts it served (by group and first
// entry, so a page served twice counts once), the keys and bytes in them,
// and when the last moving group was complete.
type rsHandoverStat struct {
	asked    time.Time
	parts    map[[2]int]bool
	complete map[int]bool
	keys     int
	bytes    int64
	done     time.Time
}

// handoverStatLocked is the handover record of stage's resize into epoch.
func (p *rsPipeScale) handoverStatLocked(stage string, epoch uint64) *rsHandoverStat {
	k := rsResizeKey{stage, epoch}
	if p.handovers == nil {
		p.handovers = map[rsResizeKey]*rsHandoverStat{}
	}
	st := p.handovers[k]
	if st == nil {
		st = &rsHandoverStat{parts: map[[2]int]bool{}, complete: map[int]bool{}}
		p.handovers[k] = st
	}
	return st
}

// handoverAsked notes a handover request of stage's resize into epoch:
// the first one starts the handover's clock.
func (s *rsScaleState) handoverAsked(key rsPipeKey, stage string, epoch uint64, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.pipeNoTermLocked(key).handoverStatLocked(stage, epoch); st.asked.IsZero() {
		st.asked = now
	}
}

// handedOver counts a page served for stage's resize into epoch, of which
// moved groups change owner; served is the groups the page's last entry
// completed (those of its old owner going to the asking worker: an empty
// group has no entries to show it). Once every moving group has been served
// whole the handover is complete, and logged with its figures.
func (s *rsScaleState) handedOver(key rsPipeKey, stage string, epoch uint64, moved int, page wire.RainstormHandover, served []int,
	now time.Time, log *slog.Logger) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pipeNoTermLocked(key)
	st := p.handoverStatLocked(stage, epoch)
	for _, part := range page.Groups {
		first := 0
		if part.Group == page.FromGroup {
			first = page.FromEntry
		}
		if pk := [2]int{part.Group, first}; !st.parts[pk] {
			st.parts[pk] = true
			st.keys += len(part.Entries)
			// The store's estimate of the entries' encoded size, as the
			// page's budget counted them: encoding the page again only to
			// measure it cost a second pass over up to a message's worth
			// of state under the scale lock.
			for i := range part.Entries {
				st.bytes += int64(ckpt.EntrySize(&part.Entries[i]))
			}
		}
		if page.More && part.Group != page.NextGroup {
			st.complete[part.Group] = true
		}
	}
	for _, g := range served {
		st.complete[g] = true
	}
	if st.done.IsZero() && len(st.complete) >= moved {
		st.done = now
		for i := range p.resizes {
			if r := &p.resizes[i]; r.Stage == stage && r.Epoch == epoch && r.Handover == 0 {
				// The resize's own figures, stored with its decision by
				// the scale loop's next round (rsAutoscale).
				r.KeysMoved, r.BytesMoved, r.Handover = st.keys, st.bytes, max(st.done.Sub(st.asked), time.Nanosecond)
				p.figures++
			}
		}
		log.Info("rainstorm: resize handover complete", "job_id", key.job, "workflow", key.wf, "stage", stage, "epoch", epoch,
			"groups_moved", moved, "keys_moved", st.keys, "bytes_moved", st.bytes, "handover", st.done.Sub(st.asked))
	}
}
