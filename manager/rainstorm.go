package manager

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"tempest/leadership"
	"tempest/rainstorm"
	"tempest/transport"
	"tempest/wire"
)

// RainStorm checkpoint store (docs/rainstorm.md, runtime). The leader
// serialises every task's open (the fence) and checkpoint through one
// committer: a group of requests is checked (compare-and-set on the task's
// incarnation, which is the fence token of its current dispatch, and on the
// checkpoint version), written to this manager's bbolt file in one
// transaction, replicated to the peers in one message, and answered only
// once a majority of the configured managers stored it. Peers keep the same
// records, so a new leader reads a majority of them before it answers any
// task and the pipeline goes on from its durable state.

const (
	rsMaxGroup = 512 // requests committed together at most
	rsFileName = "rainstorm.db"
)

var (
	rsBucketCkpt = []byte("checkpoints")
	rsBucketRows = []byte("rows")
	rsBucketHdr  = []byte("headers")
	// rsBucketBatch holds each unacknowledged batch once, keyed by task,
	// channel and sequence number, from the checkpoint that cut it until
	// one whose acknowledged positions drop it: a checkpoint rewrites its
	// small head record, never the batches an earlier one stored.
	rsBucketBatch = []byte("batches")
)

type rsStore struct {
	db *bolt.DB

	// wmu orders writes (the leader's groups, replicated groups, a sync),
	// so each one's view of the previous state is the one it replaces.
	wmu sync.Mutex
	// promised is the newest term whose leader read this store (a sync):
	// replicated groups of older terms are refused. Under wmu.
	promised uint64

	mu      sync.Mutex
	tasks   map[wire.RainstormTask]*rsStored
	headers map[[2]string]wire.RainstormHeader

	reqs       chan *rsReq
	syncedTerm atomic.Uint64
	// staleRefused counts checkpoints refused because their task runs
	// under a newer incarnation: a replaced task that went on (frozen,
	// cut off) and was fenced, as /metrics shows.
	staleRefused atomic.Uint64
	// syncedCh is closed (and forgotten) each time syncedTerm is set, to
	// wake readers waiting for this term's sync. Guarded by syncMu.
	syncMu   sync.Mutex
	syncedCh chan struct{}

	// peerHave is, per peer, the checkpoint (version, incarnation) of each
	// task the leader knows the peer stores: such a peer gets deltas. Only
	// the committer goroutine touches it; it starts empty every term.
	peerHave map[string]map[wire.RainstormTask]rsVer
}

// rsVer names one stored checkpoint of a task.
type rsVer struct{ version, inc uint64 }

func verOf(c *wire.RainstormCheckpoint) rsVer {
	if c == nil {
		return rsVer{}
	}
	return rsVer{c.Version, c.Incarnation}
}

// rsChange is one checkpoint to write: next replaces prev (nil: none) as
// the task's whole state; rows are next's published rows.
type rsChange struct {
	prev, next *wire.RainstormCheckpoint
	task       wire.RainstormTask // set only where next may be nil (a revert)
}

// rsStored is one task's records: its latest checkpoint (rows stripped)
// and the output rows of every checkpoint that published some, by version.
type rsStored struct {
	latest *wire.RainstormCheckpoint
	rows   map[uint64][]wire.RainstormRecord
}

// rsReq is one request to the committer: a checkpoint or an open.
type rsReq struct {
	ckpt  *wire.RainstormCheckpoint
	open  *wire.RainstormOpen
	from  transport.Peer // the proven sender
	reply chan rsResult
}

type rsResult struct {
	msg wire.Message
	err error
}

// rsRowsRecord is how a checkpoint's rows are kept.
type rsRowsRecord struct {
	Task    wire.RainstormTask     `cbor:"1,keyasint"`
	Version uint64                 `cbor:"2,keyasint"`
	Rows    []wire.RainstormRecord `cbor:"3,keyasint,omitempty"`
}

func (m *Manager) openRainstorm() error {
	s, err := openRSStore(m.cfg.DataDir)
	if err != nil {
		return err
	}
	m.rs = s
	m.life.Opened(s.close)
	return nil
}

// openRSStore opens (or creates) the store in dir and loads it.
func openRSStore(dir string) (*rsStore, error) {
	db, err := bolt.Open(filepath.Join(dir, rsFileName), 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open rainstorm store: %w", err)
	}
	s := &rsStore{db: db, tasks: map[wire.RainstormTask]*rsStored{}, headers: map[[2]string]wire.RainstormHeader{},
		reqs: make(chan *rsReq, 4096)}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{rsBucketCkpt, rsBucketRows, rsBucketHdr, rsBucketBatch} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		if err := tx.Bucket(rsBucketCkpt).ForEach(func(_, v []byte) error {
			c := new(wire.RainstormCheckpoint)
			if err := wire.Unmarshal(v, c); err != nil {
				return err
			}
			s.applyLocked(c)
			return nil
		}); err != nil {
			return err
		}
		if err := tx.Bucket(rsBucketBatch).ForEach(func(_, v []byte) error {
			var b wire.RainstormBatchBlob
			if err := wire.Unmarshal(v, &b); err != nil {
				return err
			}
			if st := s.tasks[b.From]; st != nil && st.latest != nil {
				st.latest.PendingBlobs = append(st.latest.PendingBlobs, b)
			}
			return nil
		}); err != nil {
			return err
		}
		if err := tx.Bucket(rsBucketRows).ForEach(func(_, v []byte) error {
			var r rsRowsRecord
			if err := wire.Unmarshal(v, &r); err != nil {
				return err
			}
			s.applyLocked(&wire.RainstormCheckpoint{Task: r.Task, Version: r.Version, Rows: r.Rows})
			return nil
		}); err != nil {
			return err
		}
		return tx.Bucket(rsBucketHdr).ForEach(func(_, v []byte) error {
			var h wire.RainstormHeader
			if err := wire.Unmarshal(v, &h); err != nil {
				return err
			}
			s.headers[[2]string{h.Job, h.Workflow}] = h
			return nil
		})
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("load rainstorm store: %w", err)
	}
	return s, nil
}

func (s *rsStore) close() error { return s.db.Close() }

// applyLocked records c in memory: its rows under its version, and c as
// the latest checkpoint when it is newer. A rows-only record (no
// incarnation) never becomes the latest.
func (s *rsStore) applyLocked(c *wire.RainstormCheckpoint) {
	st := s.tasks[c.Task]
	if st == nil {
		st = &rsStored{rows: map[uint64][]wire.RainstormRecord{}}
		s.tasks[c.Task] = st
	}
	if len(c.Rows) > 0 {
		st.rows[c.Version] = c.Rows
	}
	if c.Incarnation != 0 && (st.latest == nil || c.Version > st.latest.Version ||
		(c.Version == st.latest.Version && c.Incarnation > st.latest.Incarnation)) {
		l := *c
		l.Rows = nil
		st.latest = &l
	}
}

func rsTaskKey(t wire.RainstormTask) []byte {
	b := make([]byte, 0, len(t.Job)+len(t.Workflow)+10)
	b = append(b, t.Job...)
	b = append(b, 0)
	b = append(b, t.Workflow...)
	b = append(b, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(t.Stage))
	return binary.BigEndian.AppendUint32(b, uint32(t.Index))
}

// newer reports whether c would replace the stored latest checkpoint.
func newer(latest, c *wire.RainstormCheckpoint) bool {
	return c.Incarnation != 0 && (latest == nil || c.Version > latest.Version ||
		(c.Version == latest.Version && c.Incarnation > latest.Incarnation))
}

// rsCompose folds checkpoint c, whose PendingBlobs are the batches cut
// since prev, into the stored state prev (as rainstorm.Compose does with
// decoded batches): prev's batches c's acknowledged positions do not
// cover, then c's. The result carries c's rows (the store publishes them
// with it); c and prev are not changed.
func rsCompose(prev, c *wire.RainstormCheckpoint) *wire.RainstormCheckpoint {
	out := *c
	if prev == nil || len(prev.PendingBlobs) == 0 {
		return &out
	}
	acked := make(map[int]uint64, len(c.Outputs))
	for _, o := range c.Outputs {
		acked[o.To] = o.Acked
	}
	out.PendingBlobs = make([]wire.RainstormBatchBlob, 0, len(prev.PendingBlobs)+len(c.PendingBlobs))
	for _, b := range prev.PendingBlobs {
		if b.Seq > acked[b.To] {
			out.PendingBlobs = append(out.PendingBlobs, b)
		}
	}
	out.PendingBlobs = append(out.PendingBlobs, c.PendingBlobs...)
	return &out
}

func rsBatchKey(task []byte, b *wire.RainstormBatchBlob) []byte {
	k := append(slices.Clip(task), 0)
	k = binary.BigEndian.AppendUint32(k, uint32(b.To))
	return binary.BigEndian.AppendUint64(k, b.Seq)
}

// persist writes checkpoints and headers in one transaction (one fsync).
// A change's head (the checkpoint without its batches and rows) replaces
// the stored one; only the batches next holds and prev did not are
// written, and those prev held and next does not are deleted, so a
// checkpoint costs what it adds, not the whole unacknowledged output.
func (s *rsStore) persist(cs []rsChange, hs []wire.RainstormHeader) error {
	return s.write(cs, hs, false)
}

// revert undoes a persist whose group did not reach a majority, so this
// store holds no checkpoint the leader never acknowledged: whatever a task
// writes next is compared with, and written over, the state before.
func (s *rsStore) revert(cs []rsChange) error {
	back := make([]rsChange, 0, len(cs))
	for i := len(cs) - 1; i >= 0; i-- {
		if newer(cs[i].prev, cs[i].next) {
			back = append(back, rsChange{prev: cs[i].next, next: cs[i].prev, task: cs[i].next.Task})
		}
	}
	return s.write(back, nil, true)
}

func (s *rsStore) write(cs []rsChange, hs []wire.RainstormHeader, undo bool) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		ck, rows, hdr, bt := tx.Bucket(rsBucketCkpt), tx.Bucket(rsBucketRows), tx.Bucket(rsBucketHdr), tx.Bucket(rsBucketBatch)
		for _, ch := range cs {
			if undo && ch.next == nil {
				// The task had no checkpoint: drop its head and batches.
				k := rsTaskKey(ch.task)
				if err := ck.Delete(k); err != nil {
					return err
				}
				for i := range ch.prev.PendingBlobs {
					if err := bt.Delete(rsBatchKey(k, &ch.prev.PendingBlobs[i])); err != nil {
						return err
					}
				}
				if len(ch.prev.Rows) > 0 {
					if err := rows.Delete(binary.BigEndian.AppendUint64(slices.Clone(k), ch.prev.Version)); err != nil {
						return err
					}
				}
				continue
			}
			c := ch.next
			k := rsTaskKey(c.Task)
			if undo && len(ch.prev.Rows) > 0 {
				if err := rows.Delete(binary.BigEndian.AppendUint64(slices.Clone(k), ch.prev.Version)); err != nil {
					return err
				}
			}
			if len(c.Rows) > 0 && !undo {
				v, err := wire.Marshal(&rsRowsRecord{Task: c.Task, Version: c.Version, Rows: c.Rows})
				if err != nil {
					return err
				}
				if err := rows.Put(binary.BigEndian.AppendUint64(slices.Clone(k), c.Version), v); err != nil {
					return err
				}
			}
			if !undo && !newer(ch.prev, c) {
				continue
			}
			head := *c
			head.Rows, head.Pending, head.PendingBlobs = nil, nil, nil
			v, err := wire.Marshal(&head)
			if err != nil {
				return err
			}
			if err := ck.Put(k, v); err != nil {
				return err
			}
			type chSeq struct {
				to  int
				seq uint64
			}
			var had map[chSeq]bool
			if ch.prev != nil && len(ch.prev.PendingBlobs) > 0 {
				had = make(map[chSeq]bool, len(ch.prev.PendingBlobs))
				for i := range ch.prev.PendingBlobs {
					had[chSeq{ch.prev.PendingBlobs[i].To, ch.prev.PendingBlobs[i].Seq}] = true
				}
			}
			for i := range c.PendingBlobs {
				b := &c.PendingBlobs[i]
				id := chSeq{b.To, b.Seq}
				if had[id] {
					delete(had, id) // kept: stored already
					continue
				}
				v, err := wire.Marshal(b)
				if err != nil {
					return err
				}
				if err := bt.Put(rsBatchKey(k, b), v); err != nil {
					return err
				}
			}
			for id := range had { // acknowledged since prev
				if err := bt.Delete(rsBatchKey(k, &wire.RainstormBatchBlob{To: id.to, Seq: id.seq})); err != nil {
					return err
				}
			}
		}
		for _, h := range hs {
			v, err := wire.Marshal(&h)
			if err != nil {
				return err
			}
			if err := hdr.Put([]byte(h.Job+"\x00"+h.Workflow), v); err != nil {
				return err
			}
		}
		return nil
	})
}

// latest returns task's stored latest checkpoint (nil when none).
func (s *rsStore) latest(t wire.RainstormTask) *wire.RainstormCheckpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.tasks[t]; st != nil {
		return st.latest
	}
	return nil
}

// apply records written changes and headers in memory.
func (s *rsStore) apply(cs []rsChange, hs []wire.RainstormHeader) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range cs {
		s.applyLocked(ch.next)
	}
	for _, h := range hs {
		s.headers[[2]string{h.Job, h.Workflow}] = h
	}
}

// store persists then applies whole states; peers and a syncing leader
// use it.
func (s *rsStore) store(cs []*wire.RainstormCheckpoint, hs []wire.RainstormHeader) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	changes := make([]rsChange, 0, len(cs))
	cur := map[wire.RainstormTask]*wire.RainstormCheckpoint{}
	for _, c := range cs {
		prev, ok := cur[c.Task]
		if !ok {
			prev = s.latest(c.Task)
		}
		changes = append(changes, rsChange{prev: prev, next: c})
		if newer(prev, c) {
			cur[c.Task] = c
		}
	}
	if err := s.persist(changes, hs); err != nil {
		return err
	}
	s.apply(changes, hs)
	return nil
}

// storeReplicated stores a leader's group on a peer: whole states as they
// are, deltas composed with the state they follow. A delta whose base is
// not the stored state (this peer missed a group) is not stored; its task
// is returned, and the leader sends the whole state.
func (s *rsStore) storeReplicated(msg *wire.RainstormReplicate, stale func() string) (stored int, missing []wire.RainstormTask, err error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if msg.Term < s.promised {
		return 0, nil, &wire.Error{Code: wire.CodeStaleFence, Message: fmt.Sprintf("stale term %d: a leader of term %d read this store", msg.Term, s.promised)}
	}
	if reason := stale(); reason != "" {
		return 0, nil, &wire.Error{Code: wire.CodeStaleFence, Message: reason}
	}
	changes := make([]rsChange, 0, len(msg.Checkpoints)+len(msg.Deltas))
	cur := map[wire.RainstormTask]*wire.RainstormCheckpoint{}
	prevOf := func(t wire.RainstormTask) *wire.RainstormCheckpoint {
		if c, ok := cur[t]; ok {
			return c
		}
		return s.latest(t)
	}
	for i := range msg.Checkpoints {
		c := &msg.Checkpoints[i]
		prev := prevOf(c.Task)
		changes = append(changes, rsChange{prev: prev, next: c})
		if newer(prev, c) {
			cur[c.Task] = c
		}
	}
	for i := range msg.Deltas {
		d := &msg.Deltas[i]
		c := &d.Checkpoint
		prev := prevOf(c.Task)
		switch have := verOf(prev); {
		case have == verOf(c):
			stored++ // a repeat of what is stored
			continue
		case have != rsVer{d.BaseVersion, d.BaseIncarnation}:
			missing = append(missing, c.Task)
			continue
		}
		full := rsCompose(prev, c)
		changes = append(changes, rsChange{prev: prev, next: full})
		cur[c.Task] = full
	}
	if err := s.persist(changes, msg.Headers); err != nil {
		return 0, nil, err
	}
	s.apply(changes, msg.Headers)
	return stored + len(changes), missing, nil
}

func (m *Manager) registerRainstorm() {
	// A task's open, checkpoints and route requests come only from the
	// worker it is dispatched to (authz.go): the handlers drop a request
	// from a node running no task of the pipeline before it is queued, and
	// the committer checks the exact task, in the same view of the job
	// table it checks the incarnation in.
	handle(m, wire.TypeRainstormOpen, func(ctx context.Context, from transport.Peer, msg *wire.RainstormOpen) (wire.Message, error) {
		if _, err := m.rsReady(); err != nil {
			return nil, err
		}
		if !m.rsSenderInPipeline(from.NodeID, msg.Task.Job, msg.Task.Workflow) {
			m.unauthorized(wire.TypeRainstormOpen, from, msg.Task.Job, msg.Task.Workflow, "no task of the pipeline dispatched to the sender")
			return nil, rsNotDispatched(msg.Task)
		}
		return m.rsSubmit(ctx, &rsReq{open: msg, from: from})
	})
	handle(m, wire.TypeRainstormCheckpoint, func(ctx context.Context, from transport.Peer, msg *wire.RainstormCheckpoint) (wire.Message, error) {
		if _, err := m.rsReady(); err != nil {
			return nil, err
		}
		if !m.rsSenderInPipeline(from.NodeID, msg.Task.Job, msg.Task.Workflow) {
			m.unauthorized(wire.TypeRainstormCheckpoint, from, msg.Task.Job, msg.Task.Workflow, "no task of the pipeline dispatched to the sender")
			if in := m.rsTaskInfo(msg.Task); in.found && msg.Incarnation < in.token {
				m.rsStaleRefused(msg, in) // a replaced worker's task, still running (thawed)
			}
			return rsFencedAck(msg, "task not dispatched to this sender"), nil
		}
		if len(msg.Pending) > 0 { // decoded batches: keep them in the store's form
			packed, err := rainstorm.PackPending(msg)
			if err != nil {
				return nil, wire.Errorf(wire.CodeMalformed, "checkpoint %d: %v", msg.Version, err)
			}
			msg = packed
		}
		return m.rsSubmit(ctx, &rsReq{ckpt: msg, from: from})
	})
	handle(m, wire.TypeRainstormRoutesRequest, m.handleRSRoutes)
	handle(m, wire.TypeRainstormReplicate, func(_ context.Context, from transport.Peer, msg *wire.RainstormReplicate) (wire.Message, error) {
		if !m.isPeer(from.NodeID) {
			return nil, wire.Errorf(wire.CodeRejected, "%s is not a manager of this datacenter", from.NodeID)
		}
		stored, missing, err := m.rs.storeReplicated(msg, func() string { return m.rsStaleReason(from.NodeID, msg.Term) })
		if err != nil {
			return nil, fmt.Errorf("store replicated checkpoints: %w", err)
		}
		return &wire.RainstormReplicateAck{Stored: stored, Missing: missing}, nil
	})
	handle(m, wire.TypeRainstormSyncRequest, func(_ context.Context, from transport.Peer, msg *wire.RainstormSyncRequest) (wire.Message, error) {
		if !m.isPeer(from.NodeID) {
			return nil, wire.Errorf(wire.CodeRejected, "%s is not a manager of this datacenter", from.NodeID)
		}
		return m.rs.promise(msg.Term, msg.Jobs, msg.After), nil
	})
}

// rsStaleReason says why a replicated group of term from sender must not
// be stored, or "": it comes from a deposed leader (an older term than
// this manager's), or in this manager's term from another than its leader.
// The store also refuses terms older than a sync it answered (promise).
func (m *Manager) rsStaleReason(sender string, term uint64) string {
	st := m.elector.Status()
	switch {
	case term < st.Term:
		return fmt.Sprintf("stale term %d: this manager is in term %d", term, st.Term)
	case term == st.Term && st.Leader != "" && st.Leader != sender:
		return fmt.Sprintf("%s does not lead term %d; %s does", sender, term, st.Leader)
	}
	return ""
}

// promise answers a new leader's sync: from now on no group of an older
// term is stored here, and the snapshot follows every group stored before.
func (s *rsStore) promise(term uint64, jobs []string, after []byte) *wire.RainstormSyncResponse {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if term > s.promised {
		s.promised = term
	}
	return s.snapshot(jobs, after)
}

// rsSyncPage is about how many bytes of records one sync page carries: the
// transport refuses a message over 10 MiB, and a store holds every
// pipeline's state and output.
const rsSyncPage = 4 << 20

// snapshot is one page of everything stored for jobs (all when empty):
// each task's latest checkpoint and every version's rows, in key order
// from after (exclusive), up to about rsSyncPage bytes, and the headers
// with the first page. The keys are stable, so a page's cursor means the
// same whatever is written between pages.
func (s *rsStore) snapshot(jobs []string, after []byte) *wire.RainstormSyncResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &wire.RainstormSyncResponse{}
	want := func(job string) bool { return len(jobs) == 0 || slices.Contains(jobs, job) }
	type entry struct {
		key []byte
		c   wire.RainstormCheckpoint
	}
	var es []entry
	for t, st := range s.tasks {
		if !want(t.Job) {
			continue
		}
		k := rsTaskKey(t)
		if st.latest != nil {
			es = append(es, entry{append(slices.Clone(k), 0), *st.latest})
		}
		for v, rows := range st.rows {
			ek := binary.BigEndian.AppendUint64(append(slices.Clone(k), 1), v)
			es = append(es, entry{ek, wire.RainstormCheckpoint{Task: t, Version: v, Rows: rows}})
		}
	}
	slices.SortFunc(es, func(a, b entry) int { return bytes.Compare(a.key, b.key) })
	size := 0
	for i, e := range es {
		if after != nil && bytes.Compare(e.key, after) <= 0 {
			continue
		}
		if size > 0 && size+rsSize(&e.c) > rsSyncPage {
			out.More, out.Next = true, es[i-1].key
			break
		}
		size += rsSize(&e.c)
		out.Checkpoints = append(out.Checkpoints, e.c)
	}
	if after == nil {
		for k, h := range s.headers {
			if want(k[0]) {
				out.Headers = append(out.Headers, h)
			}
		}
	}
	return out
}

// rsSize estimates the encoded size of c's records.
func rsSize(c *wire.RainstormCheckpoint) int {
	n := 256 + 32*len(c.State)
	recs := func(rs []wire.RainstormRecord) {
		for _, r := range rs {
			n += 12 + len(r.Fields)
			for _, f := range r.Fields {
				n += len(f)
			}
		}
	}
	for i := range c.PendingBlobs {
		n += 32 + len(c.PendingBlobs[i].Batch)
	}
	recs(c.Rows)
	return n
}

// rsReady reports whether this manager may answer tasks: it leads, and in
// this term it has read the checkpoints of a majority and synced state.
func (m *Manager) rsReady() (*leadership.Term, error) {
	lt := m.leading()
	if lt == nil {
		return nil, m.elector.NotLeaderError()
	}
	if m.rs.syncedTerm.Load() != lt.Number() || !lt.Synced() {
		return nil, wire.Errorf(wire.CodeUnavailable, "leader is still reading the pipelines' state")
	}
	return lt, nil
}

func (m *Manager) rsSubmit(ctx context.Context, r *rsReq) (wire.Message, error) {
	if _, err := m.rsReady(); err != nil {
		return nil, err
	}
	// Bounded: a request queued as this manager lost leadership is never
	// taken, and the task has long resent it elsewhere.
	ctx, cancel := context.WithTimeout(ctx, 4*m.cfg.QuorumTimeout+time.Second)
	defer cancel()
	r.reply = make(chan rsResult, 1)
	select {
	case m.rs.reqs <- r:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case res := <-r.reply:
		return res.msg, res.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// rsLead is the leader's part for one term: read a majority's checkpoints,
// then commit requests until the term ends.
func (m *Manager) rsLead(ctx context.Context, lt *leadership.Term) {
	for attempt := 0; ; attempt++ {
		err := m.rsSync(ctx, lt)
		if err == nil {
			break
		}
		if attempt%20 == 0 {
			m.log.Warn("rainstorm: reading peers' checkpoints", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
	m.rs.peerHave = nil // this term knows nothing of the peers' stores yet
	m.rs.setSynced(lt.Number())
	for {
		var group []*rsReq
		select {
		case <-ctx.Done():
			return
		case r := <-m.rs.reqs:
			group = append(group, r)
		}
	drain:
		for len(group) < rsMaxGroup {
			select {
			case r := <-m.rs.reqs:
				group = append(group, r)
			default:
				break drain
			}
		}
		m.rsCommit(ctx, lt, group)
	}
}

// rsSync merges a majority's records into this manager's.
func (m *Manager) rsSync(ctx context.Context, lt *leadership.Term) error {
	if len(m.peerIDs) == 0 {
		return nil
	}
	var (
		mu    sync.Mutex
		resps []*wire.RainstormSyncResponse
		wg    sync.WaitGroup
	)
	for _, id := range m.peerIDs {
		wg.Go(func() {
			all := &wire.RainstormSyncResponse{}
			var after []byte
			for {
				cctx, cancel := context.WithTimeout(ctx, m.cfg.QuorumTimeout) // per page
				resp, err := m.tr.Call(cctx, m.peers[id], &wire.RainstormSyncRequest{Term: lt.Number(), After: after})
				cancel()
				r, ok := resp.(*wire.RainstormSyncResponse)
				if err != nil || !ok {
					m.log.Debug("rainstorm: read a peer's checkpoints", "peer", id, "err", err)
					return
				}
				all.Checkpoints = append(all.Checkpoints, r.Checkpoints...)
				all.Headers = append(all.Headers, r.Headers...)
				if !r.More {
					break
				}
				after = r.Next
			}
			mu.Lock()
			resps = append(resps, all)
			mu.Unlock()
		})
	}
	wg.Wait()
	if 1+len(resps) < m.quorumSize {
		return fmt.Errorf("%d of %d managers answered, %d needed", 1+len(resps), len(m.peerIDs)+1, m.quorumSize)
	}
	for _, r := range resps {
		cs := make([]*wire.RainstormCheckpoint, len(r.Checkpoints))
		for i := range r.Checkpoints {
			cs[i] = &r.Checkpoints[i]
		}
		if err := m.rs.store(cs, r.Headers); err != nil {
			return err
		}
	}
	return nil
}

// rsTaskInfo is what the leader's job table says of a task now.
type rsTaskInfo struct {
	found    bool
	attempts int
	records  int64
	bad      int64
	token    uint64
	status   wire.WorkflowStatus
	worker   string
	waiting  string // why it is not placed (PENDING only)
}

// rsTasks returns, for a pipeline, its spec and each task's info in task
// order.
func (m *Manager) rsTasks(job, wf string) (*rainstorm.Spec, []wire.RainstormTask, []rsTaskInfo) {
	m.mu.Lock()
	defer m.mu.Unlock()
	j := m.jobs[job]
	if j == nil {
		return nil, nil, nil
	}
	var parts []*workflowState
	for _, w := range j.wfs {
		if w.rec.Spec.Name == wf && w.rec.Spec.Type == rainstorm.TypeName {
			parts = append(parts, w)
		}
	}
	if len(parts) == 0 {
		return nil, nil, nil
	}
	p, err := rainstorm.DecodeTaskParams(parts[0].rec.Spec.Params)
	if err != nil {
		return nil, nil, nil
	}
	order := rainstorm.TaskOrder(&p.Spec)
	infos := make([]rsTaskInfo, len(order))
	for i := range order {
		order[i].Job, order[i].Workflow = job, wf
		if i < len(parts) {
			r := &parts[i].rec
			infos[i] = rsTaskInfo{found: true, attempts: r.Attempts, token: r.FenceToken, status: r.Status, worker: r.Worker,
				records: r.LastProgress.CompletedCount, bad: r.LastProgress.FailedCount}
			if r.Status == wire.WorkflowPending {
				infos[i].waiting = parts[i].waiting
			}
		}
	}
	return &p.Spec, order, infos
}

func (m *Manager) rsTaskInfo(t wire.RainstormTask) rsTaskInfo {
	_, order, infos := m.rsTasks(t.Job, t.Workflow)
	for i, o := range order {
		if o.Stage == t.Stage && o.Index == t.Index {
			return infos[i]
		}
	}
	return rsTaskInfo{}
}

func (m *Manager) rsRoutes(job, wf string) []wire.RainstormRoute {
	_, order, infos := m.rsTasks(job, wf)
	return m.rsRoutesOf(order, infos)
}

func (m *Manager) rsRoutesOf(order []wire.RainstormTask, infos []rsTaskInfo) []wire.RainstormRoute {
	out := make([]wire.RainstormRoute, len(order))
	for i, t := range order {
		out[i] = wire.RainstormRoute{Stage: t.Stage, Index: t.Index}
		in := infos[i]
		switch in.status {
		case wire.WorkflowCompleted:
			// A finished task still acknowledges resent batches for a
			// while: its upstream takes those acks from the node named.
			out[i].Done, out[i].Node = true, in.worker
		case wire.WorkflowAssigned, wire.WorkflowRunning:
			if wv, ok := m.workers.get(in.worker); ok {
				out[i].Addr, out[i].Incarnation, out[i].Node = wv.Addr, in.token, in.worker
			}
		}
	}
	return out
}

// handleRSRoutes answers a worker that runs a task of the pipeline with
// the routes its tasks need (rsVisibleRoutes); anyone else is refused.
func (m *Manager) handleRSRoutes(_ context.Context, from transport.Peer, msg *wire.RainstormRoutesRequest) (wire.Message, error) {
	if _, err := m.rsReady(); err != nil {
		return nil, err
	}
	routes, ok := m.rsRoutesFor(from.NodeID, msg.Job, msg.Workflow)
	if !ok {
		m.unauthorized(wire.TypeRainstormRoutesRequest, from, msg.Job, msg.Workflow, "no task of the pipeline dispatched to the sender")
		return nil, wire.Errorf(wire.CodeRejected, "no task of pipeline %s is dispatched to %s", msg.Workflow, from.NodeID)
	}
	return &wire.RainstormRoutes{Routes: routes}, nil
}

// rsRoutesFor is what node may know of a pipeline's routes, and whether it
// runs any of its tasks.
func (m *Manager) rsRoutesFor(node, job, wf string) ([]wire.RainstormRoute, bool) {
	_, order, infos := m.rsTasks(job, wf)
	routes := m.rsRoutesOf(order, infos)
	for _, in := range infos {
		if in.found && in.worker == node && in.running() {
			return rsVisibleRoutes(node, routes, infos), true
		}
	}
	return nil, false
}

// rsFencedAck refuses checkpoint c as fenced: the task stops. Current is
// one past c's incarnation, never the task's real token.
func rsFencedAck(c *wire.RainstormCheckpoint, reason string) *wire.RainstormCheckpointAck {
	return &wire.RainstormCheckpointAck{Task: c.Task, Incarnation: c.Incarnation, Version: c.Version, Refused: true,
		Current: c.Incarnation + 1, Reason: reason}
}

// rsStaleRefused counts and logs a refused checkpoint of an incarnation
// older than the task's current one: a replaced task that went on running
// (a frozen worker that thawed). Its sender may also be counted as
// unauthorized when the task now runs elsewhere; both are true.
func (m *Manager) rsStaleRefused(c *wire.RainstormCheckpoint, in rsTaskInfo) {
	m.rs.staleRefused.Add(1)
	m.log.Info("rainstorm: checkpoint of a replaced incarnation refused", "job_id", c.Task.Job, "workflow", c.Task.Workflow,
		"stage", c.Task.Stage, "task", c.Task.Index, "incarnation", c.Incarnation, "current", in.token, "version", c.Version)
}

// current reports whether inc is the running incarnation of task.
func (in rsTaskInfo) current(inc uint64) bool {
	return in.found && in.token == inc && (in.status == wire.WorkflowAssigned || in.status == wire.WorkflowRunning)
}

// rsCommit checks, stores, replicates and answers one group of requests.
func (m *Manager) rsCommit(ctx context.Context, lt *leadership.Term, group []*rsReq) {
	type accepted struct {
		r   *rsReq
		ack *wire.RainstormCheckpointAck
	}
	var (
		acc     []accepted
		opens   []*rsReq
		cs      []rsChange
		deltas  []*wire.RainstormCheckpoint // cs[i] as the task wrote it
		hs      []wire.RainstormHeader
		staged  = map[wire.RainstormTask]*wire.RainstormCheckpoint{}
		answers = map[*rsReq]rsResult{}
	)
	infos := make([]rsTaskInfo, len(group))
	for i, r := range group {
		infos[i] = m.rsTaskInfo(r.task())
	}
	m.rs.mu.Lock()
	for i, r := range group {
		in := infos[i]
		if o := r.open; o != nil {
			if in.worker != r.from.NodeID {
				if in.running() { // else a late word from a replaced attempt: stale, not forged
					m.unauthorized(wire.TypeRainstormOpen, r.from, o.Task.Job, o.Task.Workflow, "task dispatched to another worker")
				}
				answers[r] = rsResult{err: rsNotDispatched(o.Task)}
				continue
			}
			if !in.current(o.Incarnation) {
				// The text names no token: it would let a sender
				// forge the current incarnation.
				answers[r] = rsResult{err: wire.Errorf(wire.CodeStaleFence, "task %d.%d of %s: incarnation %d is not its running dispatch (%s)",
					o.Task.Stage, o.Task.Index, o.Task.Workflow, o.Incarnation, in.status)}
				continue
			}
			if o.Task.Stage == 0 && o.HasHeader {
				k := [2]string{o.Task.Job, o.Task.Workflow}
				if h, ok := m.rs.headers[k]; !ok || !slices.Equal(h.Header, o.Header) {
					hs = append(hs, wire.RainstormHeader{Job: o.Task.Job, Workflow: o.Task.Workflow, Header: o.Header, HasHeader: true})
				}
			}
			opens = append(opens, r)
			continue
		}
		c := r.ckpt
		if in.worker != r.from.NodeID {
			if in.running() {
				m.unauthorized(wire.TypeRainstormCheckpoint, r.from, c.Task.Job, c.Task.Workflow, "task dispatched to another worker")
			}
			if c.Incarnation < in.token {
				m.rsStaleRefused(c, in)
			}
			answers[r] = rsResult{msg: rsFencedAck(c, "task not dispatched to this sender")}
			continue
		}
		// Current is the writer's own incarnation, or one past it when
		// fenced: never another dispatch's token.
		ack := &wire.RainstormCheckpointAck{Task: c.Task, Incarnation: c.Incarnation, Version: c.Version, Current: c.Incarnation}
		st := m.rs.tasks[c.Task]
		var have uint64
		var latest *wire.RainstormCheckpoint
		if st != nil && st.latest != nil {
			latest, have = st.latest, st.latest.Version
		}
		if s, ok := staged[c.Task]; ok {
			latest, have = s, s.Version
		}
		switch {
		case !in.current(c.Incarnation):
			answers[r] = rsResult{msg: rsFencedAck(c, fmt.Sprintf("incarnation %d is not the task's running dispatch", c.Incarnation))}
			m.rsStaleRefused(c, in)
		case latest != nil && c.Version == latest.Version && latest.Incarnation == c.Incarnation:
			if _, inGroup := staged[c.Task]; inGroup {
				// A resend of a checkpoint of this very group: durable
				// only if the group is.
				acc = append(acc, accepted{r, ack})
				break
			}
			answers[r] = rsResult{msg: ack} // a resend of what is stored
		case c.Version != have+1:
			ack.Refused = true
			ack.Reason = fmt.Sprintf("version %d does not follow the stored %d", c.Version, have)
			answers[r] = rsResult{msg: ack}
		default:
			// Pending is a delta. The stores keep whole states (a copy
			// stands alone whatever group it missed), but write and send
			// only what changed: see persist and rsReplicate.
			full := *rsCompose(latest, c)
			staged[c.Task] = &full
			cs = append(cs, rsChange{prev: latest, next: &full})
			deltas = append(deltas, c)
			acc = append(acc, accepted{r, ack})
		}
	}
	m.rs.mu.Unlock()

	var failed error
	if len(cs) > 0 || len(hs) > 0 {
		failed = m.rsReplicate(ctx, lt, cs, deltas, hs)
	}
	for _, a := range acc {
		if failed != nil {
			answers[a.r] = rsResult{err: failed}
		} else {
			answers[a.r] = rsResult{msg: a.ack}
		}
	}
	for _, r := range opens {
		if failed != nil {
			answers[r] = rsResult{err: failed}
			continue
		}
		answers[r] = rsResult{msg: m.rsOpenReply(r)}
	}
	for r, res := range answers {
		r.reply <- res
	}
	if failed == nil && len(opens) > 0 {
		m.rsRoutesChanged(lt, opens)
	}
}

func (r *rsReq) task() wire.RainstormTask {
	if r.open != nil {
		return r.open.Task
	}
	return r.ckpt.Task
}

// rsReplicate makes cs and hs durable here and on a majority, then
// applies them. deltas[i] is cs[i] as its task wrote it (Pending cut since
// cs[i].prev): a peer known to hold cs[i].prev gets the delta, another the
// whole state, and a peer that answers that it lacks a delta's base gets
// the whole state at once.
func (m *Manager) rsReplicate(ctx context.Context, lt *leadership.Term, cs []rsChange, deltas []*wire.RainstormCheckpoint, hs []wire.RainstormHeader) error {
	m.rs.wmu.Lock()
	defer m.rs.wmu.Unlock()
	seen := map[wire.RainstormTask]bool{}
	for _, c := range cs {
		if !seen[c.next.Task] && verOf(m.rs.latest(c.next.Task)) != verOf(c.prev) {
			// Another write (a sync) replaced the state this group was
			// checked against: the tasks resend and are checked again.
			return wire.Errorf(wire.CodeUnavailable, "task %d.%d: stored checkpoint changed while its group was checked", c.next.Task.Stage, c.next.Task.Index)
		}
		seen[c.next.Task] = true
	}
	if err := m.rs.persist(cs, hs); err != nil {
		return wire.Errorf(wire.CodeUnavailable, "store checkpoints: %v", err)
	}
	stored := 1
	if len(m.peerIDs) > 0 {
		if m.rs.peerHave == nil {
			m.rs.peerHave = map[string]map[wire.RainstormTask]rsVer{}
		}
		cctx, cancel := context.WithTimeout(ctx, m.cfg.QuorumTimeout)
		var (
			mu sync.Mutex
			wg sync.WaitGroup
		)
		haves := make(map[string]map[wire.RainstormTask]rsVer, len(m.peerIDs))
		for _, id := range m.peerIDs {
			haves[id] = m.rs.peerHave[id]
			delete(m.rs.peerHave, id) // known again only once this round succeeds
		}
		for _, id := range m.peerIDs {
			have := haves[id]
			wg.Go(func() {
				ok := m.rsReplicateTo(cctx, lt, id, have, cs, deltas, hs)
				mu.Lock()
				defer mu.Unlock()
				if !ok {
					return
				}
				stored++
				if have == nil {
					have = map[wire.RainstormTask]rsVer{}
				}
				for _, c := range cs {
					if newer(c.prev, c.next) {
						have[c.next.Task] = verOf(c.next)
					}
				}
				m.rs.peerHave[id] = have
			})
		}
		wg.Wait()
		cancel()
	}
	if stored < m.quorumSize {
		if err := m.rs.revert(cs); err != nil {
			m.log.Warn("rainstorm: undo a group that did not reach a majority", "err", err)
		}
		return wire.Errorf(wire.CodeNoQuorum, "checkpoints stored by %d managers, %d needed", stored, m.quorumSize)
	}
	m.rs.apply(cs, hs)
	return nil
}

// rsReplicateTo sends one group to peer id, whose stored versions are have
// (as far as this leader knows), and reports whether the peer stored it
// all.
func (m *Manager) rsReplicateTo(ctx context.Context, lt *leadership.Term, id string, have map[wire.RainstormTask]rsVer,
	cs []rsChange, deltas []*wire.RainstormCheckpoint, hs []wire.RainstormHeader) bool {
	msg := &wire.RainstormReplicate{Term: lt.Number(), Headers: hs}
	for i, c := range cs {
		if v, ok := have[c.next.Task]; ok && v == verOf(c.prev) {
			base := verOf(c.prev)
			msg.Deltas = append(msg.Deltas, wire.RainstormDelta{BaseVersion: base.version, BaseIncarnation: base.inc, Checkpoint: *deltas[i]})
			have[c.next.Task] = verOf(c.next) // a later change of the same task in this group follows it
			continue
		}
		msg.Checkpoints = append(msg.Checkpoints, *c.next)
	}
	resp, err := m.tr.Call(ctx, m.peers[id], msg)
	ack, ok := resp.(*wire.RainstormReplicateAck)
	if err != nil || !ok {
		m.log.Debug("rainstorm: replicate to peer", "peer", id, "err", err)
		return false
	}
	if len(ack.Missing) == 0 {
		return true
	}
	// The peer missed a group: send those tasks' whole states, every
	// change of the group in order (each carries its own rows).
	whole := &wire.RainstormReplicate{Term: lt.Number()}
	for _, c := range cs {
		if slices.Contains(ack.Missing, c.next.Task) {
			whole.Checkpoints = append(whole.Checkpoints, *c.next)
		}
	}
	resp, err = m.tr.Call(ctx, m.peers[id], whole)
	if _, ok := resp.(*wire.RainstormReplicateAck); err != nil || !ok {
		m.log.Debug("rainstorm: replicate whole states to peer", "peer", id, "err", err)
		return false
	}
	return true
}

func (m *Manager) rsOpenReply(r *rsReq) *wire.RainstormOpenReply {
	o := r.open
	routes, _ := m.rsRoutesFor(r.from.NodeID, o.Task.Job, o.Task.Workflow)
	reply := &wire.RainstormOpenReply{Routes: routes}
	m.rs.mu.Lock()
	defer m.rs.mu.Unlock()
	if st := m.rs.tasks[o.Task]; st != nil && st.latest != nil {
		c := *st.latest
		reply.Checkpoint = &c
	}
	if h, ok := m.rs.headers[[2]string{o.Task.Job, o.Task.Workflow}]; ok {
		reply.Header, reply.HasHeader = h.Header, h.HasHeader
	}
	return reply
}

// rsRetryLost re-dispatches the pipeline tasks placed on a worker that
// SWIM declared dead, without the wait for its self-fencing that other
// workflows get (see workerLost).
func (m *Manager) rsRetryLost(worker, reason string) {
	if m.leading() == nil {
		return
	}
	m.update(func(tx *txn) {
		for _, w := range m.wfs {
			if w.rec.Worker == worker && w.rec.Spec.Type == rainstorm.TypeName &&
				(w.rec.Status == wire.WorkflowAssigned || w.rec.Status == wire.WorkflowRunning) {
				m.requeueLocked(tx, w, reason)
			}
		}
	})
}

// rsTaskFailedLocked handles a pipeline task whose run failed (a malformed
// record under on_bad_record: fail, an exec program that keeps crashing, a
// refused checkpoint): the failure is the pipeline's, the same on any
// worker, so the task is not retried and the job ends FAILED with the
// reason; the other tasks would wait for its output forever. A task that
// was replaced reports CANCELLED and takes the normal retry path. The job is
// ended like an abort_on_fail threshold does it: on a goroutine of the
// leader term, once this state is committed.
func (m *Manager) rsTaskFailedLocked(tx *txn, w *workflowState, status wire.WorkflowStatus, reason string) bool {
	lt := tx.leading
	if lt == nil || w.rec.Spec.Type != rainstorm.TypeName || status != wire.WorkflowFailed {
		return false
	}
	w.rec.Status = wire.WorkflowFailed
	w.rec.Error = reason
	w.rec.Worker = ""
	w.rec.Cores = nil
	tx.touchWorkflow(w, true)
	if w.job.rec.Status.Terminal() {
		return true
	}
	jobID := w.rec.JobID
	why := fmt.Sprintf("pipeline %s: task %d of %d failed: %s", w.rec.Spec.Name, w.rec.Spec.Shard, w.rec.Spec.Shards, reason)
	m.log.Warn("rainstorm task failed; ending the job", "job_id", jobID, "workflow_id", w.rec.WorkflowID, "reason", reason)
	tx.afterCommit(func() {
		lt.Go(func(ctx context.Context) {
			if _, err := m.cancelJob(ctx, jobID, wire.JobFailed, why); err != nil {
				m.log.Warn("end job after a task failure", "job_id", jobID, "err", err)
			}
		})
	})
	return true
}
