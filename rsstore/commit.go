package rsstore

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"tempest/rainstorm/ckpt"
	"tempest/transport"
	"tempest/wire"
)

// Host is what the store needs of the manager that runs it.
type Host interface {
	// Peers returns the other managers of the group and the majority
	// size, this manager counted.
	Peers() (ids []string, quorum int)
	// Call sends msg to peer id and waits for its answer.
	Call(ctx context.Context, id string, msg wire.Message) (wire.Message, error)
	// Admit is the job table's word on a task's request, taken by the
	// committer as its group is checked: nil when the task is dispatched
	// to the sender under the request's incarnation and is running, else
	// the answer the request gets (the store checks nothing more).
	Admit(r *Request) *Result
	// Opened is told of the tasks a durable group opened in term (one
	// call per group), so their pipelines' workers can be told at once.
	Opened(term uint64, opens []*wire.RainstormOpen)
	// StaleReason says why a replicated group of term from sender must
	// not be stored here ("" when it may): a deposed leader's, or one
	// from another than this term's leader.
	StaleReason(sender string, term uint64) string
	// Logger is where the store logs.
	Logger() *slog.Logger
}

// Request is one task request to the committer: a checkpoint or an open.
type Request struct {
	Ckpt *wire.RainstormCheckpoint
	Open *wire.RainstormOpen
	From transport.Peer // the proven sender

	reply chan Result
}

// Task is the task the request is about.
func (r *Request) Task() wire.RainstormTask {
	if r.Open != nil {
		return r.Open.Task
	}
	return r.Ckpt.Task
}

// Result answers a Request: an open's reply is a *wire.RainstormOpenReply
// holding the task's checkpoint and its pipeline's header (no routes: the
// manager adds them), a checkpoint's a *wire.RainstormCheckpointAck.
type Result struct {
	Msg wire.Message
	Err error
}

// Submit queues r for this term's committer and waits for its answer.
// The caller checked that this manager leads and has synced (Synced).
func (s *Store) Submit(ctx context.Context, r *Request) (wire.Message, error) {
	// Bounded: a request queued as this manager lost leadership is never
	// taken, and the task has long resent it elsewhere.
	ctx, cancel := context.WithTimeout(ctx, 4*s.cfg.QuorumTimeout+time.Second)
	defer cancel()
	r.reply = make(chan Result, 1)
	select {
	case s.reqs <- r:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case res := <-r.reply:
		return res.Msg, res.Err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Lead is the leader's part for one term: read a majority's stores, then
// commit requests until ctx (the term) ends.
func (s *Store) Lead(ctx context.Context, term uint64) {
	start, reads := time.Now(), &syncReads{}
	for attempt := 0; ; attempt++ {
		err := s.sync(ctx, term, reads)
		if err == nil {
			s.host.Logger().Info("rainstorm: store synced", "term", term, "attempts", attempt+1,
				"pages", reads.pages, "bytes", reads.bytes, "deltas", reads.deltas,
				"spread_whole", reads.spreadWhole, "spread_deltas", reads.spreadDeltas, "spread_took", reads.spreadTook,
				"took", time.Since(start))
			break
		}
		if attempt%20 == 0 {
			s.host.Logger().Warn("rainstorm: reading peers' checkpoints", "term", term, "attempt", attempt+1, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
	for {
		var group []*Request
		select {
		case <-ctx.Done():
			return
		case r := <-s.reqs:
			group = append(group, r)
		}
	drain:
		for len(group) < s.cfg.MaxGroup {
			select {
			case r := <-s.reqs:
				group = append(group, r)
			default:
				break drain
			}
		}
		for i, res := range s.Commit(ctx, term, group) {
			group[i].reply <- res
		}
	}
}

// FencedAck refuses checkpoint c as fenced: the task stops. Current is
// one past c's incarnation, never the task's real token.
func FencedAck(c *wire.RainstormCheckpoint, reason string) *wire.RainstormCheckpointAck {
	return &wire.RainstormCheckpointAck{Task: c.Task, Incarnation: c.Incarnation, Version: c.Version, Refused: true,
		Current: c.Incarnation + 1, Reason: reason}
}

// Commit checks, stores, replicates and answers one group of requests in
// term; the answers are in the group's order. Lead calls it; so do tests
// that drive a store step by step.
func (s *Store) Commit(ctx context.Context, term uint64, group []*Request) []Result {
	type accepted struct {
		i   int
		ack *wire.RainstormCheckpointAck
	}
	var (
		acc     []accepted
		opens   []int
		cs      []change
		deltas  []*wire.RainstormCheckpoint // cs[i] as the task wrote it
		hs      []wire.RainstormHeader
		staged  = map[wire.RainstormTask]snap{}
		answers = make([]Result, len(group))
		admit   = make([]*Result, len(group))
	)
	if !s.Synced(term) {
		// Deposed (see deposed), or never synced in term.
		for i := range answers {
			answers[i] = Result{Err: wire.Errorf(wire.CodeUnavailable, "this manager does not lead term %d, or has not read its peers' checkpoints in it", term)}
		}
		return answers
	}
	for i, r := range group {
		admit[i] = s.host.Admit(r)
	}
	s.mu.Lock()
	for i, r := range group {
		if a := admit[i]; a != nil {
			answers[i] = *a
			continue
		}
		if o := r.Open; o != nil {
			latest, state := s.latestLocked(o.Task, staged)
			switch {
			case latest != nil && latest.Incarnation > o.Incarnation:
				answers[i] = Result{Err: wire.Errorf(wire.CodeStaleFence, "task %d.%d of %s: incarnation %d was replaced",
					o.Task.Stage, o.Task.Index, o.Task.Workflow, o.Incarnation)}
				continue
			case latest == nil || latest.Incarnation < o.Incarnation:
				// The open is a write: the task's state, now the new
				// incarnation's, stored on a majority before the task
				// hears of it. Whatever an older incarnation wrote past
				// it in a group that missed its majority then loses to
				// it everywhere (newer), rows and all (Rows).
				next := reopen(latest, o)
				staged[o.Task] = snap{next, state}
				cs = append(cs, change{prev: latest, next: next, prevState: state, nextState: state})
				deltas = append(deltas, nil)
			}
			if o.Task.Stage == 0 && o.HasHeader {
				k := [2]string{o.Task.Job, o.Task.Workflow}
				if h, ok := s.headers[k]; !ok || !h.HasHeader || !slices.Equal(h.Header, o.Header) {
					hs = append(hs, wire.RainstormHeader{Job: o.Task.Job, Workflow: o.Task.Workflow, Header: o.Header, HasHeader: true})
				}
			}
			opens = append(opens, i)
			continue
		}
		c := r.Ckpt
		// Current is the writer's own incarnation, or one past it when
		// fenced: never another dispatch's token.
		ack := &wire.RainstormCheckpointAck{Task: c.Task, Incarnation: c.Incarnation, Version: c.Version, Current: c.Incarnation}
		latest, state := s.latestLocked(c.Task, staged)
		var have uint64
		if latest != nil {
			have = latest.Version
		}
		switch {
		case latest == nil || latest.Incarnation != c.Incarnation:
			// Admitted, so the task runs under c's incarnation, but its
			// open is not what this store holds: the leader changed since
			// and the new one has not read it yet, or the open's group
			// failed. Not a refusal (that would fail the task): it
			// resends, or opens again.
			answers[i] = Result{Err: wire.Errorf(wire.CodeUnavailable, "task %d.%d: incarnation %d has not opened here", c.Task.Stage, c.Task.Index, c.Incarnation)}
		case latest != nil && c.Version == latest.Version && latest.Incarnation == c.Incarnation:
			if _, inGroup := staged[c.Task]; inGroup {
				// A resend of a checkpoint of this very group: durable
				// only if the group is.
				acc = append(acc, accepted{i, ack})
				break
			}
			answers[i] = Result{Msg: ack} // a resend of what is stored
		case c.Version > have+1:
			// The version it follows is not here, yet its incarnation
			// opened here: this manager led in an older term and has not
			// heard of the newer one, whose groups it missed. Refused,
			// the task would fail; it resends to the leader it finds.
			answers[i] = Result{Err: wire.Errorf(wire.CodeUnavailable, "task %d.%d: version %d does not follow the stored %d: this manager is behind",
				c.Task.Stage, c.Task.Index, c.Version, have)}
		case c.Version != have+1:
			ack.Refused = true
			ack.Reason = fmt.Sprintf("version %d does not follow the stored %d", c.Version, have)
			answers[i] = Result{Msg: ack}
		default:
			// Pending and Groups are deltas. The stores keep whole
			// states (a copy stands alone whatever group it missed), but
			// compose, write and send only what changed: see aggState,
			// persist and replicate.
			full := compose(latest, c)
			fullState := state.with(c.Groups)
			staged[c.Task] = snap{full, fullState}
			cs = append(cs, change{prev: latest, next: full, prevState: state, nextState: fullState, delta: c.Groups, replay: c})
			deltas = append(deltas, c)
			acc = append(acc, accepted{i, ack})
		}
	}
	s.mu.Unlock()

	var failed error
	if len(cs) > 0 || len(hs) > 0 {
		failed = s.replicate(ctx, term, cs, deltas, hs)
	}
	for _, a := range acc {
		if failed != nil {
			answers[a.i] = Result{Err: failed}
		} else {
			answers[a.i] = Result{Msg: a.ack}
		}
	}
	var opened []*wire.RainstormOpen
	for _, i := range opens {
		if failed != nil {
			answers[i] = Result{Err: failed}
			continue
		}
		answers[i] = Result{Msg: s.openReply(group[i].Open)}
		if group[i].Open.Part == 0 {
			// A later part reads what part 0 opened: no new route.
			opened = append(opened, group[i].Open)
		}
	}
	if len(opened) > 0 {
		s.host.Opened(term, opened)
	}
	return answers
}

// latestLocked is task's head and aggregate state as a group sees them:
// staged by an earlier request of the group, else stored. Under mu.
func (s *Store) latestLocked(t wire.RainstormTask, staged map[wire.RainstormTask]snap) (*wire.RainstormCheckpoint, *aggState) {
	if c, ok := staged[t]; ok {
		return c.head, c.state
	}
	if st := s.tasks[t]; st != nil {
		return st.latest, st.state
	}
	return nil, nil
}

// reopen is latest (nil: no state yet) made the state of o's incarnation,
// which opens at its version.
func reopen(latest *wire.RainstormCheckpoint, o *wire.RainstormOpen) *wire.RainstormCheckpoint {
	next := &wire.RainstormCheckpoint{Task: o.Task}
	if latest != nil {
		*next = *latest
		next.Rows = nil
	}
	next.Incarnation = o.Incarnation
	next.Opened = append(slices.Clip(next.Opened), wire.RainstormOpened{Incarnation: o.Incarnation, Version: next.Version})
	return next
}

// openReply is what an open is answered with: the task's latest
// checkpoint (none before its first) and its pipeline's header. A
// checkpoint too large for one message goes in parts of about
// ckpt.PageBytes (nextPart), o.Part the one asked for; one past the last
// is answered with none, and the task reads again from part 0. Where
// each part starts is kept per version (openParts), so a task reading its
// parts in order costs each part its own entries.
func (s *Store) openReply(o *wire.RainstormOpen) *wire.RainstormOpenReply {
	reply := &wire.RainstormOpenReply{}
	s.mu.Lock()
	h, ok := s.headers[[2]string{o.Task.Job, o.Task.Workflow}]
	s.mu.Unlock()
	if ok {
		reply.Header, reply.HasHeader = h.Header, h.HasHeader
	}
	// The state is immutable: the part is cut outside mu, so the
	// committer does not wait for it.
	head, state := s.head(o.Task)
	if head == nil || head.Version == 0 || o.Part < 0 {
		return reply
	}
	c := *head
	c.Opened = nil // the store's
	v := verOf(head)
	n, at := s.openParts.from(o.Task, v, o.Part)
	for n < o.Part { // parts before o.Part not cut yet: walk to it
		_, next, more := nextPart(&c, state, at, ckpt.PageBytes)
		if !more {
			s.openParts.drop(o.Task, v)
			return reply // past the last part
		}
		n, at = n+1, next
		s.openParts.add(o.Task, v, n, at)
	}
	p, next, more := nextPart(&c, state, at, ckpt.PageBytes)
	if more {
		s.openParts.add(o.Task, v, o.Part+1, next)
	} else {
		s.openParts.drop(o.Task, v)
	}
	reply.Checkpoint = p
	return reply
}

// openParts keeps, per task, where each part of its latest checkpoint's
// open reply starts, for the version being read: a task reads its parts
// one after another, and each is cut from where the one before ended. A
// task's entry goes once its last part is cut, or once its latest version
// changes (Store.apply): kept for every task ever opened, a long-lived
// manager's map only grew.
type openParts struct {
	mu    sync.Mutex
	tasks map[wire.RainstormTask]*partStarts
}

type partStarts struct {
	v      ver
	starts []partCut // starts[n]: where part n starts
}

// from returns the part nearest below n (n itself when known) whose start
// is known, and that start.
func (o *openParts) from(t wire.RainstormTask, v ver, n int) (known int, at partCut) {
	o.mu.Lock()
	defer o.mu.Unlock()
	ps := o.tasks[t]
	if ps == nil || ps.v != v {
		if o.tasks == nil {
			o.tasks = map[wire.RainstormTask]*partStarts{}
		}
		ps = &partStarts{v: v, starts: []partCut{{}}}
		o.tasks[t] = ps
	}
	known = min(n, len(ps.starts)-1)
	return known, ps.starts[known]
}

// add records where part n of t's version v starts.
func (o *openParts) add(t wire.RainstormTask, v ver, n int, at partCut) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if ps := o.tasks[t]; ps != nil && ps.v == v && n == len(ps.starts) {
		ps.starts = append(ps.starts, at)
	}
}

// drop forgets t's part starts of version v (those of another version
// are a reader's of that one).
func (o *openParts) drop(t wire.RainstormTask, v ver) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if ps := o.tasks[t]; ps != nil && ps.v == v {
		delete(o.tasks, t)
	}
}

// len is how many tasks' part starts are kept.
func (o *openParts) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.tasks)
}

// replicate makes cs and hs durable here and on a majority, then applies
// them. deltas[i] is cs[i] as its task wrote it (Pending cut since
// cs[i].prev; nil for an open): a peer gets deltas unless it is known to
// hold another base (replicateTo), and one that answers that it lacks a
// delta's base gets the whole state at once.
func (s *Store) replicate(ctx context.Context, term uint64, cs []change, deltas []*wire.RainstormCheckpoint, hs []wire.RainstormHeader) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	seen := map[wire.RainstormTask]bool{}
	for _, c := range cs {
		if !seen[c.next.Task] && verOf(s.Head(c.next.Task)) != verOf(c.prev) {
			// Another write (a sync) replaced the state this group was
			// checked against: the tasks resend and are checked again.
			return wire.Errorf(wire.CodeUnavailable, "task %d.%d: stored checkpoint changed while its group was checked", c.next.Task.Stage, c.next.Task.Index)
		}
		seen[c.next.Task] = true
	}
	hs = s.newest(hs)
	if err := s.persist(cs, hs); err != nil {
		return wire.Errorf(wire.CodeUnavailable, "store checkpoints: %v", err)
	}
	stored := 1
	// The peer set is held until the group is applied here and queued
	// for its learners: a learner's copy waits for every commit of a set
	// that does not name it (LearnerHost).
	peers, quorum, learners, release := s.peerSet()
	defer release()
	if len(peers) > 0 {
		if s.peerHave == nil {
			s.peerHave = map[string]map[wire.RainstormTask]ver{}
		}
		var (
			mu sync.Mutex
			wg sync.WaitGroup
		)
		ok := make(map[string]bool, len(peers))
		for _, id := range peers {
			have := s.peerHave[id]
			wg.Go(func() {
				r := s.replicateTo(ctx, term, id, have, cs, deltas, hs)
				mu.Lock()
				defer mu.Unlock()
				ok[id] = r
				if r {
					stored++
				}
			})
		}
		wg.Wait()
		for _, id := range peers {
			if !ok[id] && stored < quorum {
				continue // undone below: the peer is taken to hold what it held
			}
			// It stored the group, or likely did (an answer that came too
			// late): if not, it names the task missing next time and
			// gets the whole state then. Forgetting it instead sent the
			// whole state on every checkpoint to a slow or dead peer.
			have := s.peerHave[id]
			if have == nil {
				have = map[wire.RainstormTask]ver{}
				s.peerHave[id] = have
			}
			for _, c := range cs {
				if newer(c.prev, c.next) {
					have[c.next.Task] = verOf(c.next)
				}
			}
		}
	}
	if stored < quorum {
		if err := s.revert(cs); err != nil {
			s.host.Logger().Warn("rainstorm: undo a group that did not reach a majority", "err", err)
		}
		return wire.Errorf(wire.CodeNoQuorum, "checkpoints stored by %d managers, %d needed", stored, quorum)
	}
	s.apply(cs, hs)
	if len(learners) > 0 || s.feeds.active() {
		// Durable: the learners get it too, never waited for nor counted.
		s.sendLearners(term, peers, learners, learnerGroup{cs: cs, deltas: deltas, hs: hs})
	}
	return nil
}

// replicateTo sends one group to peer id, whose stored versions are have
// (as far as this leader can tell; have is not changed), and reports
// whether the peer stored it all. A change goes as a delta unless the
// peer is known to hold neither its base nor the change itself (a task
// have does not name is taken to be at the leader's base: after a sync
// every peer that answered holds what the leader holds); an open's delta
// is its head alone, since it changes no entry and no batch. A peer that
// lacks a delta's base names the task missing and gets the whole state in
// the same round. The group goes in as many messages as it needs under
// the transport's cap (ckpt.Paged), in the group's order, so a task's
// delta never reaches the peer before the whole state it follows; the
// peer stores a checkpoint sent in parts once it has the last.
func (s *Store) replicateTo(ctx context.Context, term uint64, id string, have map[wire.RainstormTask]ver,
	cs []change, deltas []*wire.RainstormCheckpoint, hs []wire.RainstormHeader) bool {
	// Runs of consecutive changes of one form, each paged on its own.
	type run struct {
		delta bool
		cs    []*wire.RainstormCheckpoint
	}
	var runs []run
	add := func(delta bool, c *wire.RainstormCheckpoint) {
		if n := len(runs); n == 0 || runs[n-1].delta != delta {
			runs = append(runs, run{delta: delta})
		}
		runs[len(runs)-1].cs = append(runs[len(runs)-1].cs, c)
	}
	// Every part of a delta names its checkpoint, so the base is found
	// by that.
	type named struct {
		task wire.RainstormTask
		v    ver
	}
	bases := map[named]ver{}
	sent := map[wire.RainstormTask]ver{} // a later change of a task in this group follows the one before
	for i, c := range cs {
		v, known := sent[c.next.Task]
		if !known {
			v, known = have[c.next.Task]
		}
		if known && v != verOf(c.prev) && v != verOf(c.next) {
			add(false, wholeOf(c))
			sent[c.next.Task] = verOf(c.next)
			continue
		}
		d := deltas[i]
		if d == nil { // an open: the new incarnation and lineage
			h := *c.next
			h.PendingBlobs = nil
			d = &h
		}
		bases[named{c.next.Task, verOf(c.next)}] = verOf(c.prev)
		add(true, d)
		sent[c.next.Task] = verOf(c.next)
	}
	var msgs []*wire.RainstormReplicate
	for _, r := range runs {
		for _, page := range ckpt.Paged(r.cs, ckpt.PageBytes) {
			msg := &wire.RainstormReplicate{Term: term}
			if !r.delta {
				msg.Checkpoints = derefs(page)
			}
			for _, p := range page {
				if r.delta {
					base := bases[named{p.Task, verOf(p)}]
					msg.Deltas = append(msg.Deltas, wire.RainstormDelta{BaseVersion: base.version, BaseIncarnation: base.inc, Checkpoint: *p})
				}
			}
			msgs = append(msgs, msg)
		}
	}
	if len(msgs) == 0 {
		msgs = append(msgs, &wire.RainstormReplicate{Term: term})
	}
	msgs[0].Headers = hs
	var missing []wire.RainstormTask
	for _, msg := range msgs {
		resp, err := s.call(ctx, id, msg)
		ack, ok := resp.(*wire.RainstormReplicateAck)
		if err != nil || !ok {
			s.host.Logger().Debug("rainstorm: replicate to peer", "peer", id, "err", err)
			return false
		}
		missing = append(missing, ack.Missing...)
	}
	if len(missing) == 0 {
		return true
	}
	// The peer missed a group: send those tasks' whole states, every
	// change of the group in order (each carries its own rows).
	var whole []*wire.RainstormCheckpoint
	for _, c := range cs {
		if slices.Contains(missing, c.next.Task) {
			whole = append(whole, wholeOf(c))
		}
	}
	for _, page := range ckpt.Paged(whole, ckpt.PageBytes) {
		resp, err := s.call(ctx, id, &wire.RainstormReplicate{Term: term, Checkpoints: derefs(page)})
		if _, ok := resp.(*wire.RainstormReplicateAck); err != nil || !ok {
			s.host.Logger().Debug("rainstorm: replicate whole states to peer", "peer", id, "err", err)
			return false
		}
	}
	return true
}

// call sends one message of a round to peer id, bounded by QuorumTimeout:
// per message, not per round, since a group carrying a state over the
// message cap takes several messages, each up to a few MB, and a round
// bounded as a whole missed its majority whenever the parts outlasted one
// timeout (a peer that does not answer still costs one timeout).
func (s *Store) call(ctx context.Context, id string, msg wire.Message) (wire.Message, error) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.QuorumTimeout)
	defer cancel()
	return s.host.Call(cctx, id, msg)
}

func derefs(cs []*wire.RainstormCheckpoint) []wire.RainstormCheckpoint {
	out := make([]wire.RainstormCheckpoint, len(cs))
	for i, c := range cs {
		out[i] = *c
	}
	return out
}
