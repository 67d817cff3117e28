package rsstore

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"tempest/internal/lifecycle"
	"tempest/wire"
)

// Learners: a manager added to the group at runtime is a learner until
// the group promotes it, and the group promotes it once it reports
// synced. A learner never counts toward a group's majority, yet once
// promoted it may be half of one (add m4, remove m1: {m3, m4} is a
// majority of {m2, m3, m4}), so before it reports synced it must hold
// every checkpoint a majority of the voters holds. Two paths give it
// them, and every acknowledged checkpoint takes at least one:
//
//   - the leader's commits send every group that reached its majority to
//     the learners of the peer set the commit read (learnerFeeds), in
//     commit order, never waiting for them and never counting them;
//   - the learner copies the leader's store (CopyFrom), a sync read of
//     that one peer, which the leader answers only once every commit begun
//     under an older peer set (one that did not name the learner) is
//     applied: such a commit is then in the copy, and every later one is
//     in the learner's feed.
//
// A fed group may reach the learner before the copy holds its base: it
// names the task missing and is sent the whole state, as a voter that
// missed a group is. The copy and the feed only ever keep the newer of
// two states (wholeChange), so their order does not matter.
//
// Two more steps make the feed as good as a voter's replication:
//
//   - a new leader's feed starts with a catch-up (catchUpLearners): the
//     learner's store is read and sent what it lacks, as a sync's spread
//     does for a voter, never counted. A deposed leader's feed may have
//     left groups unsent, and the new leader's commits alone would never
//     send them;
//   - a removal waits until every voter's feed from its learner days is
//     delivered (Fed). Promoting a learner alone loses nothing (a
//     majority of the grown set meets every majority of the old one), but
//     a removal after it counts the promoted member as a full copy: a
//     group still queued for it would then be on fewer than a majority of
//     the voters that remain.

// LearnerHost is a Host whose group has learners. A Host that is not one
// has none: commits go to Peers alone.
type LearnerHost interface {
	Host
	// HoldPeers is Peers for one commit, with the learners of the same
	// peer set. The commit calls release once it is applied here and its
	// group is queued for those learners; a learner's copy is answered
	// only once no commit holds a set older than the one naming it
	// (leadership.PeerView.Settled).
	HoldPeers() (voters []string, quorum int, learners []string, release func())
}

// peerSet is the group one commit replicates to.
func (s *Store) peerSet() (voters []string, quorum int, learners []string, release func()) {
	if lh, ok := s.host.(LearnerHost); ok {
		return lh.HoldPeers()
	}
	voters, quorum = s.host.Peers()
	return voters, quorum, nil, func() {}
}

// CopyFrom copies the store of leader, the group's leader, into this
// one: a learner's copy, read page by page with the sync's read (term 0:
// the leader promises nothing, see HandleCopy) and stored as a sync
// stores what it read. A page that fails is asked again, a few times,
// from where the read stopped. It returns how many tasks this store holds
// afterwards.
func (s *Store) CopyFrom(ctx context.Context, leader string) (int, error) {
	reads := &syncReads{}
	var pages, size, deltas int
	for attempt := 0; ; attempt++ {
		p, b, d, err := s.read(ctx, 0, leader, reads.of(leader))
		pages, size, deltas = pages+p, size+b, deltas+d
		if err == nil {
			// As a sync stores what it read: a delta only on the state it
			// was cut from (one the feed changed meanwhile is read again).
			if err = s.merge([]string{leader}, reads); err == nil {
				break
			}
		}
		if attempt == 4 || !lifecycle.Sleep(ctx, 100*time.Millisecond<<attempt) {
			return 0, fmt.Errorf("copy the checkpoints of %s (page %d): %w", leader, pages, err)
		}
	}
	s.mu.Lock()
	n := len(s.tasks)
	s.mu.Unlock()
	s.host.Logger().Info("rainstorm: copied the leader's checkpoints", "leader", leader, "pages", pages, "bytes", size, "deltas", deltas, "tasks", n)
	return n, nil
}

// HandleCopy answers a page of a learner's copy (CopyFrom): a sync page
// that promises nothing, since a learner leads no term. The caller checks
// that the sender is a learner of this leader's group and that every
// commit begun before it was one has been applied here.
func (s *Store) HandleCopy(msg *wire.RainstormSyncRequest) (*wire.RainstormSyncResponse, error) {
	if msg.Term != 0 {
		return nil, wire.Errorf(wire.CodeMalformed, "a learner's copy names no term (got %d)", msg.Term)
	}
	if s.syncedTerm.Load() == 0 {
		// Not a leader that read a majority's stores: a checkpoint on
		// that majority may be missing here, and the learner would count
		// without it.
		return nil, wire.Errorf(wire.CodeUnavailable, "this manager has not read its peers' checkpoints as a leader")
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.snapshot(msg.Jobs, msg.After, syncAsk{have: msg.Have, deltas: msg.Deltas}), nil
}

// learnerQueue bounds the groups queued for one learner (groups commit
// back to back while pipelines run: this is tens of seconds of them at
// least). A learner that falls this far behind loses its queue, logged,
// and is caught up in its place (catchUp): its store is read and sent what
// it lacks.
const learnerQueue = 4096

// learnerFeeds sends the leader's durable groups to the learners, one
// goroutine per learner so that a slow one holds up no commit and no other
// learner. Each learner gets its groups in commit order, a group resent
// until the learner stores it: a delta must find its base. The feeds
// belong to one term; a commit of another term stops them and starts
// afresh (what a learner holds is then unknown, and a delta it cannot
// apply gets the whole state). The Store owns them: Close stops them.
type learnerFeeds struct {
	mu     sync.Mutex
	term   uint64
	feeds  map[string]*learnerFeed
	wg     sync.WaitGroup
	closed bool
	// sent is closed and replaced whenever a feed sends a group or stops
	// (Fed waits on it).
	sent chan struct{}
}

// learnerFeed is one learner's queue.
type learnerFeed struct {
	id     string
	term   uint64
	cancel context.CancelFunc
	wake   chan struct{} // a group was queued, or the feed was told to drain

	mu       sync.Mutex
	queue    []learnerGroup
	gen      uint64 // counts the times the queue was dropped
	draining bool   // promoted: send what is queued, then stop

	// have is what the learner is taken to store (replicateTo), as of
	// haveGen; only the feed's goroutine touches them.
	have    map[wire.RainstormTask]ver
	haveGen uint64
}

// learnerGroup is one durable group as replicate sent it to the voters,
// or a catch-up (catchUpLearners).
type learnerGroup struct {
	cs      []change
	deltas  []*wire.RainstormCheckpoint
	hs      []wire.RainstormHeader
	catchUp bool
}

// sendLearners queues a durable group of term for learners, and stops
// the feeds of members no longer learners: a promoted one once what is
// queued for it is sent (its later groups reach it as a voter's), a
// removed one at once. Called by replicate, under wmu, so groups queue in
// commit order.
func (s *Store) sendLearners(term uint64, voters, learners []string, g learnerGroup) {
	f := &s.feeds
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.atTerm(term) {
		return
	}
	for id, lf := range f.feeds {
		switch {
		case slices.Contains(learners, id):
		case slices.Contains(voters, id):
			lf.drain()
		default:
			lf.cancel()
			delete(f.feeds, id)
		}
	}
	for _, id := range learners {
		s.feedOf(term, id).push(g, s.host.Logger())
	}
}

// catchUpLearners starts a feed with a catch-up for each member of the
// current peer set that the sync of term did not count as a voter (read
// lists those it did): its store is read and sent what it lacks of this
// one. A leader calls it once its sync is done, so a learner gets what a
// deposed leader's feed left unsent before any promotion of its may be
// followed by a removal (Fed). A learner promoted while the sync ran is a
// voter by now, yet the sync's spread put what it merged on a majority of
// the voters without it: it is caught up the same way.
func (s *Store) catchUpLearners(term uint64, read []string) {
	voters, _, learners, release := s.peerSet()
	release()
	var ids []string
	for _, id := range slices.Concat(voters, learners) {
		if !slices.Contains(read, id) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return
	}
	f := &s.feeds
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.atTerm(term) {
		return
	}
	for _, id := range ids {
		s.feedOf(term, id).push(learnerGroup{catchUp: true}, s.host.Logger())
	}
}

// atTerm makes the feeds term's, stopping those of an older term (what a
// learner holds is then unknown), and reports whether feeds may start.
// Under f.mu.
func (f *learnerFeeds) atTerm(term uint64) bool {
	if f.closed {
		return false
	}
	if f.term != term {
		for _, lf := range f.feeds {
			lf.cancel()
		}
		f.feeds, f.term = nil, term
	}
	return true
}

// feedOf is learner id's feed in term, started if it has none. Under
// s.feeds.mu, after atTerm(term).
func (s *Store) feedOf(term uint64, id string) *learnerFeed {
	f := &s.feeds
	if lf := f.feeds[id]; lf != nil {
		return lf
	}
	if f.feeds == nil {
		f.feeds = map[string]*learnerFeed{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	lf := &learnerFeed{id: id, term: term, cancel: cancel, wake: make(chan struct{}, 1), have: map[wire.RainstormTask]ver{}}
	f.feeds[id] = lf
	f.wg.Go(func() { s.feed(ctx, lf) })
	return lf
}

// push queues g. A full queue is replaced by a catch-up first, which
// sends the learner whatever the dropped groups held.
func (lf *learnerFeed) push(g learnerGroup, log *slog.Logger) {
	lf.mu.Lock()
	if len(lf.queue) >= learnerQueue {
		log.Warn("rainstorm: a learner fell too far behind; dropped the checkpoints queued for it, and catches up instead",
			"learner", lf.id, "term", lf.term, "dropped", len(lf.queue))
		// A catch-up sends it whatever the dropped groups held.
		lf.queue = []learnerGroup{{catchUp: true}}
		lf.gen++
	}
	lf.queue = append(lf.queue, g)
	lf.draining = false // a learner again
	lf.mu.Unlock()
	lf.poke()
}

func (lf *learnerFeed) drain() {
	lf.mu.Lock()
	lf.draining = true
	lf.mu.Unlock()
	lf.poke()
}

func (lf *learnerFeed) poke() {
	select {
	case lf.wake <- struct{}{}:
	default:
	}
}

// next is the group at the head of the queue (left there until it is
// sent, see pop) and the queue's generation, or false once the feed is
// drained or stopped.
func (lf *learnerFeed) next(ctx context.Context) (learnerGroup, uint64, bool) {
	for {
		lf.mu.Lock()
		if lf.haveGen != lf.gen { // the queue was dropped: nothing is known
			lf.have, lf.haveGen = map[wire.RainstormTask]ver{}, lf.gen
		}
		if len(lf.queue) > 0 {
			g, gen := lf.queue[0], lf.gen
			lf.mu.Unlock()
			return g, gen, true
		}
		draining := lf.draining
		lf.mu.Unlock()
		if draining {
			return learnerGroup{}, 0, false
		}
		select {
		case <-lf.wake:
		case <-ctx.Done():
			return learnerGroup{}, 0, false
		}
	}
}

// pop removes the group next returned in generation gen, unless the
// queue was dropped since.
func (lf *learnerFeed) pop(gen uint64) {
	lf.mu.Lock()
	defer lf.mu.Unlock()
	if lf.gen == gen && len(lf.queue) > 0 {
		lf.queue = lf.queue[1:]
	}
}

// feed sends lf's groups to its learner until ctx ends, the queue is
// drained after a promotion, or this store no longer leads lf's term (a
// later leader feeds the learner from its own commits).
func (s *Store) feed(ctx context.Context, lf *learnerFeed) {
	defer s.feeds.done(lf)
	log := s.host.Logger().With("learner", lf.id, "term", lf.term)
	for {
		g, gen, ok := lf.next(ctx)
		if !ok {
			if ctx.Err() == nil && !s.feeds.retire(lf) {
				continue // made a learner again, and a group queued
			}
			return
		}
		for attempt := 0; ; attempt++ {
			if !s.Synced(lf.term) {
				log.Debug("rainstorm: no longer leading; a learner's feed stops")
				return
			}
			var ok bool
			if g.catchUp {
				ok = s.catchUp(ctx, lf.term, lf.id) == nil
			} else {
				ok = s.replicateTo(ctx, lf.term, lf.id, lf.have, g.cs, g.deltas, g.hs)
			}
			if ok {
				if g.catchUp {
					// It holds this store's latest of every task now, or
					// newer: a task have does not name goes as a delta.
					clear(lf.have)
				}
				for _, c := range g.cs {
					if newer(c.prev, c.next) {
						lf.have[c.next.Task] = verOf(c.next)
					}
				}
				lf.pop(gen)
				s.feeds.signal()
				break
			}
			if attempt%20 == 0 {
				log.Info("rainstorm: a learner did not store a group; sending it again", "attempt", attempt+1)
			}
			if !lifecycle.Sleep(ctx, min(50*time.Millisecond<<min(attempt, 5), s.cfg.QuorumTimeout)) {
				return
			}
		}
	}
}

// catchUp reads learner id's store as the leader of term (the learner
// then refuses older terms' groups, as a voter does after a sync) and
// sends it what it lacks of this store, as a sync's spread does.
func (s *Store) catchUp(ctx context.Context, term uint64, id string) error {
	pr := &peerRead{}
	if _, _, _, err := s.read(ctx, term, id, pr); err != nil {
		return fmt.Errorf("read learner %s: %w", id, err)
	}
	recs := s.lacking(holdingOf(&pr.got))
	if err := s.fill(ctx, term, id, recs); err != nil {
		return fmt.Errorf("send learner %s what it lacks: %w", id, err)
	}
	s.host.Logger().Info("rainstorm: caught up a learner", "learner", id, "term", term, "records", len(recs))
	return nil
}

// RemovalFed is a leader's wait before it removes id from the group:
// settled waits until no commit holds a peer set older than the current
// one and returns that set's voters (leadership.PeerView.Settled), so
// every group committed while a voter was a learner is queued; then Fed
// waits for the feeds of the voters the removal leaves.
func (s *Store) RemovalFed(ctx context.Context, settled func(context.Context) ([]string, error), id string) error {
	voters, err := settled(ctx)
	if err != nil {
		return err
	}
	return s.Fed(ctx, slices.DeleteFunc(slices.Clone(voters), func(v string) bool { return v == id }))
}

// Fed waits until no feed of the members ids (the voters a removal
// leaves) holds a group it has not delivered, or ctx ends. A member's feed
// is its learner days': once it is a voter, its commits count it and
// its feed only drains. The caller first waits until no commit holds a
// peer set older than the current one (leadership.PeerView.Settled), so
// every group committed while a voter was a learner is queued by then.
func (s *Store) Fed(ctx context.Context, ids []string) error {
	f := &s.feeds
	for {
		f.mu.Lock()
		var behind string
		for _, id := range ids {
			if lf := f.feeds[id]; lf != nil && lf.queued() > 0 {
				behind = id
				break
			}
		}
		if f.sent == nil {
			f.sent = make(chan struct{})
		}
		sent := f.sent
		f.mu.Unlock()
		if behind == "" {
			return nil
		}
		select {
		case <-sent:
		case <-ctx.Done():
			return fmt.Errorf("%s has not been sent every checkpoint committed while it was a learner: %w", behind, ctx.Err())
		}
	}
}

// queued is how many groups lf has not delivered.
func (lf *learnerFeed) queued() int {
	lf.mu.Lock()
	defer lf.mu.Unlock()
	return len(lf.queue)
}

// signal wakes Fed's waiters: a feed sent a group or stopped.
func (f *learnerFeeds) signal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sent != nil {
		close(f.sent)
		f.sent = nil
	}
}

// retire forgets a drained feed, unless a group was queued to it since it
// found its queue empty (sendLearners queues under f.mu, so once retired
// the feed gets nothing more: a later group starts a new one).
func (f *learnerFeeds) retire(lf *learnerFeed) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	lf.mu.Lock()
	empty := len(lf.queue) == 0
	lf.mu.Unlock()
	if !empty {
		return false
	}
	if f.feeds[lf.id] == lf {
		delete(f.feeds, lf.id)
	}
	return true
}

// done releases a stopped feed's context, and forgets it unless another
// feed for the same learner replaced it.
func (f *learnerFeeds) done(lf *learnerFeed) {
	lf.cancel()
	f.mu.Lock()
	if f.feeds[lf.id] == lf {
		delete(f.feeds, lf.id)
	}
	f.mu.Unlock()
	f.signal()
}

// close stops every feed and waits for their goroutines.
func (f *learnerFeeds) close() {
	f.mu.Lock()
	f.closed = true
	for _, lf := range f.feeds {
		lf.cancel()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// active reports whether a feed runs: a group with no learner still
// tells the feeds of members that stopped being learners.
func (f *learnerFeeds) active() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.feeds) > 0
}
