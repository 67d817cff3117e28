package rsstore

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/btree"
	bolt "go.etcd.io/bbolt"

	"tempest/rainstorm/ckpt"
	"tempest/wire"
)

// FileName is the store's bbolt file in a manager's data directory.
const FileName = "rainstorm.db"

var (
	bucketCkpt = []byte("checkpoints")
	bucketRows = []byte("rows")
	bucketHdr  = []byte("headers")
	// bucketBatch holds each unacknowledged batch once, keyed by task,
	// channel and sequence number, from the checkpoint that cut it until
	// one whose acknowledged positions drop it: a checkpoint rewrites its
	// small head record, never the batches an earlier one stored.
	bucketBatch = []byte("batches")
	// bucketState holds an aggregate's entries one by one, keyed by task,
	// key group and key: a checkpoint writes the keys it changed, never
	// the whole state (which outgrows what a write per checkpoint can
	// afford long before it outgrows memory).
	bucketState = []byte("state")
)

// Store is one manager's copy of every pipeline's checkpoints and output.
type Store struct {
	db   *bolt.DB
	host Host
	cfg  Config

	// wmu orders writes (the leader's groups, replicated groups, a sync),
	// so each one's view of the previous state is the one it replaces.
	wmu sync.Mutex
	// promised is the newest term whose leader read this store (a sync):
	// replicated groups of older terms are refused. Under wmu.
	promised uint64

	mu      sync.Mutex
	tasks   map[wire.RainstormTask]*stored
	headers map[[2]string]wire.RainstormHeader

	reqs       chan *Request
	syncedTerm atomic.Uint64
	// syncedCh is closed (and forgotten) each time syncedTerm is set, to
	// wake readers waiting for this term's sync. Guarded by syncMu.
	syncMu   sync.Mutex
	syncedCh chan struct{}

	// peerHave is, per peer, the checkpoint (version, incarnation) of each
	// task the leader takes the peer to store (replicateTo). Only the
	// committer touches it; it starts empty every term.
	peerHave map[string]map[wire.RainstormTask]ver
	// parts holds, per task, a checkpoint a leader is sending in parts
	// (its group outgrew a message) until its last part. Under wmu.
	parts map[wire.RainstormTask]*ckpt.Joiner
	// openParts is where the parts of each task's open reply start.
	openParts openParts
	// feeds send the leader's durable groups to the learners (learner.go).
	feeds learnerFeeds
	// cutRows is the rows record a sync page is cutting, decoded.
	cutRows cutRows
}

// Config tunes a Store.
type Config struct {
	// QuorumTimeout bounds each message of a replication round, of a
	// sync and of what a sync spreads (a round or a sync of a large state
	// takes several).
	QuorumTimeout time.Duration
	// MaxGroup is how many requests are committed together at most.
	MaxGroup int
	// NoSync skips the fsync of each write: for tests and simulations
	// only, where a crash of the process is not one of the faults.
	NoSync bool
}

func (c Config) withDefaults() Config {
	if c.QuorumTimeout <= 0 {
		c.QuorumTimeout = 2 * time.Second
	}
	if c.MaxGroup <= 0 {
		c.MaxGroup = 512
	}
	return c
}

// ver names one stored checkpoint of a task.
type ver struct{ version, inc uint64 }

func compareVer(a, b ver) int {
	return cmp.Or(cmp.Compare(a.version, b.version), cmp.Compare(a.inc, b.inc))
}

func verOf(c *wire.RainstormCheckpoint) ver {
	if c == nil {
		return ver{}
	}
	return ver{c.Version, c.Incarnation}
}

// change is one checkpoint to write: next replaces prev (nil: none) as
// the task's latest; rows are next's published rows. prev and next are
// heads (no Groups): their aggregate states are prevState and nextState.
// delta names the keys next changed (a task's checkpoint's Groups, or
// what a whole state differs in: aggState.diff): the state bucket gets
// nextState's value of each (a revert prevState's), or loses the key
// where that has none, so a checkpoint's write costs its delta, not the
// state. An open shares its state with prev and writes none of it.
type change struct {
	prev, next           *wire.RainstormCheckpoint
	prevState, nextState *aggState
	delta                []wire.RainstormGroupState
	task                 wire.RainstormTask // set only where next may be nil (a revert)
	// replay is next as a delta on prev of its incarnation, put-only (a
	// task's checkpoint, a replicated or synced delta): the store's
	// history keeps it (stored.note). nil for a whole state or an open.
	replay *wire.RainstormCheckpoint
	// rows is next's rows flattened, by persist, for the disk and then
	// for memory (apply): encoded once per store.
	rows flatRows
}

// snap is one task's state as a group of changes sees it: a head and its
// aggregate state.
type snap struct {
	head  *wire.RainstormCheckpoint
	state *aggState
}

// stored is one task's records: its latest checkpoint (rows and
// aggregate state stripped), that state (an immutable aggState, so a
// reader pages through it while newer versions are composed), and the
// output rows of every checkpoint that published some, by
// (version, incarnation): a version an incarnation wrote in a group that
// missed its majority may be held here beside the same version of the
// incarnation that replaced it, and only the task's lineage (Opened)
// says which one the output holds.
type stored struct {
	latest *wire.RainstormCheckpoint
	state  *aggState
	rows   map[ver]flatRows
	// hist is the deltas of the latest versions of latest's incarnation,
	// oldest first, the last one ending at latest (history.go); histSize
	// their estimated bytes.
	hist     []histDelta
	histSize int
}

// flatRows is a checkpoint's rows as the store keeps them, in memory and
// on disk: their flat layout in a CBOR byte string, as
// wire.RainstormRows marshals them. A record output keeps every row of a
// run on every manager; held as decoded records that was three pointers
// a row for the collector to trace on every cycle (a record output's
// managers spent a fifth of their CPU in GC), held flat it is none, and
// the bytes written to bbolt are these, not a second encoding. Rows are
// decoded only when read: the output, a sync page, a spread.
type flatRows []byte

// flatten encodes rows for the store.
func flatten(rows wire.RainstormRows) flatRows {
	if len(rows) == 0 {
		return nil
	}
	b, _ := rows.MarshalCBOR() // cannot fail: the flat layout takes any record
	return b
}

// MarshalCBOR implements cbor.Marshaler: f is a CBOR item already.
func (f flatRows) MarshalCBOR() ([]byte, error) { return f, nil }

// records decodes f. f was encoded by this store (flatten; at Open,
// from rows decoded and checked), so it always decodes: an error is a
// broken invariant, not bad input.
func (f flatRows) records() wire.RainstormRows {
	if len(f) == 0 {
		return nil
	}
	var rows wire.RainstormRows
	if err := rows.UnmarshalCBOR(f); err != nil {
		panic(fmt.Sprintf("rsstore: rows this store encoded do not decode: %v", err))
	}
	return rows
}

// rowsRecord is how a checkpoint's rows are kept. Inc is 0 in records
// written before rows were kept by incarnation. It is read with Rows
// decoded (rows older stores wrote as an array of records included) and
// written from flat rows as they are (rowsRecordOut): the same CBOR.
type rowsRecord struct {
	Task    wire.RainstormTask `cbor:"1,keyasint"`
	Version uint64             `cbor:"2,keyasint"`
	Rows    wire.RainstormRows `cbor:"3,keyasint,omitzero"` // flat; older stores wrote an array, still read
	Inc     uint64             `cbor:"4,keyasint,omitempty"`
}

type rowsRecordOut struct {
	Task    wire.RainstormTask `cbor:"1,keyasint"`
	Version uint64             `cbor:"2,keyasint"`
	Rows    flatRows           `cbor:"3,keyasint,omitempty"`
	Inc     uint64             `cbor:"4,keyasint,omitempty"`
}

// rowsInc is the incarnation whose checkpoint published c's rows.
func rowsInc(c *wire.RainstormCheckpoint) uint64 {
	if c.Incarnation != 0 {
		return c.Incarnation
	}
	return c.RowsOf
}

func rowsKey(task []byte, version, inc uint64) []byte {
	k := binary.BigEndian.AppendUint64(slices.Clone(task), version)
	if inc == 0 {
		return k // as written before rows were kept by incarnation
	}
	return binary.BigEndian.AppendUint64(k, inc)
}

// Open opens (or creates) the store in dir and loads it. host is the
// manager that runs it.
func Open(dir string, host Host, cfg Config) (*Store, error) {
	db, err := bolt.Open(filepath.Join(dir, FileName), 0o600, &bolt.Options{Timeout: 5 * time.Second, NoSync: cfg.NoSync})
	if err != nil {
		return nil, fmt.Errorf("open rainstorm store: %w", err)
	}
	s := &Store{db: db, host: host, cfg: cfg.withDefaults(), tasks: map[wire.RainstormTask]*stored{},
		headers: map[[2]string]wire.RainstormHeader{}, reqs: make(chan *Request, 4096)}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketCkpt, bucketRows, bucketHdr, bucketBatch, bucketState} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		if err := tx.Bucket(bucketCkpt).ForEach(func(_, v []byte) error {
			c := new(wire.RainstormCheckpoint)
			if err := wire.Unmarshal(v, c); err != nil {
				return err
			}
			s.applyLocked(c, nil, nil)
			return nil
		}); err != nil {
			return err
		}
		for _, st := range s.tasks {
			if st.latest == nil {
				continue
			}
			state, err := loadState(tx.Bucket(bucketState), taskKey(st.latest.Task))
			if err != nil {
				return err
			}
			st.state = state
		}
		if err := tx.Bucket(bucketBatch).ForEach(func(_, v []byte) error {
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
		if err := tx.Bucket(bucketRows).ForEach(func(_, v []byte) error {
			var r rowsRecord
			if err := wire.Unmarshal(v, &r); err != nil {
				return err
			}
			s.applyLocked(&wire.RainstormCheckpoint{Task: r.Task, Version: r.Version, RowsOf: r.Inc}, nil, flatten(r.Rows))
			return nil
		}); err != nil {
			return err
		}
		return tx.Bucket(bucketHdr).ForEach(func(_, v []byte) error {
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

// Close stops the learners' feeds and closes the file. The committer
// (Lead) must have returned.
func (s *Store) Close() error {
	s.feeds.close()
	return s.db.Close()
}

// applyLocked records c in memory: its rows (c's, flattened) under its
// version, and c (its head) with its aggregate state as the latest
// checkpoint when it is newer. A rows-only record (no incarnation) never
// becomes the latest.
func (s *Store) applyLocked(c *wire.RainstormCheckpoint, state *aggState, rows flatRows) {
	st := s.tasks[c.Task]
	if st == nil {
		st = &stored{rows: map[ver]flatRows{}}
		s.tasks[c.Task] = st
	}
	if len(rows) > 0 {
		st.rows[ver{c.Version, rowsInc(c)}] = rows
	}
	if newer(st.latest, c) {
		l := *c
		l.Rows, l.Groups = nil, nil
		st.latest, st.state = &l, state
	}
}

func taskKey(t wire.RainstormTask) []byte {
	b := make([]byte, 0, len(t.Job)+len(t.Workflow)+10)
	b = append(b, t.Job...)
	b = append(b, 0)
	b = append(b, t.Workflow...)
	b = append(b, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(t.Stage))
	return binary.BigEndian.AppendUint32(b, uint32(t.Index))
}

// newer reports whether c would replace the stored latest checkpoint: a
// newer incarnation's state always does, whatever its version, since an
// incarnation opens (Commit) at the newest state a majority holds, and
// any later version an older one wrote was never acknowledged (it went on
// only in a group that missed its majority). Within an incarnation the
// higher version does.
func newer(latest, c *wire.RainstormCheckpoint) bool {
	return c.Incarnation != 0 && (latest == nil || c.Incarnation > latest.Incarnation ||
		(c.Incarnation == latest.Incarnation && c.Version > latest.Version))
}

// compose folds checkpoint c, whose PendingBlobs are the batches cut
// since prev, into the stored head prev (as rainstorm.Compose does with
// decoded batches): prev's batches c's acknowledged positions do not
// cover, then c's. The result is a head, carrying c's rows (the store
// publishes them with it); its aggregate state is prev's with c's Groups
// (the keys changed since prev) put in, which the caller composes beside
// it (aggState.with). c and prev are not changed.
func compose(prev, c *wire.RainstormCheckpoint) *wire.RainstormCheckpoint {
	out := *c
	out.Groups = nil
	if prev == nil {
		return &out
	}
	if c.Incarnation == prev.Incarnation {
		out.Opened = prev.Opened // the store's, never the task's
	} // else c is an open a leader replicated as a delta: its lineage is the store's
	if len(prev.PendingBlobs) == 0 {
		return &out
	}
	out.PendingBlobs = ckpt.Unacked(prev.PendingBlobs, c.PendingBlobs, c.Outputs,
		func(b *wire.RainstormBatchBlob) (int, uint64) { return b.To, b.Seq })
	return &out
}

func batchKey(task []byte, b *wire.RainstormBatchBlob) []byte {
	k := append(slices.Clip(task), 0)
	k = binary.BigEndian.AppendUint32(k, uint32(b.To))
	return binary.BigEndian.AppendUint64(k, b.Seq)
}

// persist writes checkpoints and headers in one transaction (one fsync).
// A change's head (the checkpoint without its batches and rows) replaces
// the stored one; only the batches next holds and prev did not are
// written, and those prev held and next does not are deleted, so a
// checkpoint costs what it adds, not the whole unacknowledged output.
// It flattens each change's rows into cs[i].rows, the bytes it writes
// and the ones apply then keeps.
func (s *Store) persist(cs []change, hs []wire.RainstormHeader) error {
	for i := range cs {
		if cs[i].rows == nil {
			cs[i].rows = flatten(cs[i].next.Rows)
		}
	}
	return s.write(cs, hs, false)
}

// revert undoes a persist whose group did not reach a majority, so this
// store holds no checkpoint the leader never acknowledged: whatever a task
// writes next is compared with, and written over, the state before. A
// change made from a delta is undone key by key: each key the delta wrote
// gets back its value before, or goes when it had none.
func (s *Store) revert(cs []change) error {
	back := make([]change, 0, len(cs))
	for i := len(cs) - 1; i >= 0; i-- {
		if c := cs[i]; newer(c.prev, c.next) {
			back = append(back, change{prev: c.next, next: c.prev, prevState: c.nextState, nextState: c.prevState,
				delta: c.delta, task: c.next.Task})
		}
	}
	return s.write(back, nil, true)
}

func (s *Store) write(cs []change, hs []wire.RainstormHeader, undo bool) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		ck, rows, hdr, bt := tx.Bucket(bucketCkpt), tx.Bucket(bucketRows), tx.Bucket(bucketHdr), tx.Bucket(bucketBatch)
		st := tx.Bucket(bucketState)
		for _, ch := range cs {
			if undo && ch.next == nil {
				// The task had no checkpoint: drop its head and batches.
				k := taskKey(ch.task)
				if err := ck.Delete(k); err != nil {
					return err
				}
				if err := writeState(st, k, ch); err != nil {
					return err
				}
				for i := range ch.prev.PendingBlobs {
					if err := bt.Delete(batchKey(k, &ch.prev.PendingBlobs[i])); err != nil {
						return err
					}
				}
				if len(ch.prev.Rows) > 0 {
					if err := rows.Delete(rowsKey(k, ch.prev.Version, rowsInc(ch.prev))); err != nil {
						return err
					}
				}
				continue
			}
			c := ch.next
			k := taskKey(c.Task)
			if undo && len(ch.prev.Rows) > 0 {
				if err := rows.Delete(rowsKey(k, ch.prev.Version, rowsInc(ch.prev))); err != nil {
					return err
				}
			}
			if len(ch.rows) > 0 && !undo {
				inc := rowsInc(c)
				v, err := wire.Marshal(&rowsRecordOut{Task: c.Task, Version: c.Version, Inc: inc, Rows: ch.rows})
				if err != nil {
					return err
				}
				if err := rows.Put(rowsKey(k, c.Version, inc), v); err != nil {
					return err
				}
			}
			if !undo && !newer(ch.prev, c) {
				continue
			}
			head := *c
			head.Rows, head.Pending, head.PendingBlobs, head.Groups = nil, nil, nil, nil
			v, err := wire.Marshal(&head)
			if err != nil {
				return err
			}
			if err := ck.Put(k, v); err != nil {
				return err
			}
			if err := writeState(st, k, ch); err != nil {
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
				if err := bt.Put(batchKey(k, b), v); err != nil {
					return err
				}
			}
			for id := range had { // acknowledged since prev
				if err := bt.Delete(batchKey(k, &wire.RainstormBatchBlob{To: id.to, Seq: id.seq})); err != nil {
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

// Latest returns task's stored latest checkpoint (nil when none), its
// rows stripped, with its whole aggregate state: that costs the state
// once per checkpoint (Head does not). The caller must not change it.
func (s *Store) Latest(t wire.RainstormTask) *wire.RainstormCheckpoint {
	head, state := s.head(t)
	if head == nil || state == nil {
		return head
	}
	c := *head
	c.Groups = state.whole()
	return &c
}

// Head returns task's stored latest checkpoint (nil when none) without
// its rows and its aggregate state: its positions, counters and batches.
// The caller must not change it.
func (s *Store) Head(t wire.RainstormTask) *wire.RainstormCheckpoint {
	head, _ := s.head(t)
	return head
}

// head returns task's latest head and aggregate state.
func (s *Store) head(t wire.RainstormTask) (*wire.RainstormCheckpoint, *aggState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.tasks[t]; st != nil {
		return st.latest, st.state
	}
	return nil, nil
}

// Rows returns the output rows of task's checkpoints up to its latest, in
// version order: of each version, the rows of the incarnation that wrote
// it in the task's lineage, never those of one it replaced.
func (s *Store) Rows(t wire.RainstormTask) []wire.RainstormRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.tasks[t]
	if st == nil || st.latest == nil {
		return nil
	}
	keys := slices.SortedFunc(maps.Keys(st.rows), compareVer)
	var rows []wire.RainstormRecord
	for _, k := range keys {
		if w := writer(st.latest, k.version); k.version <= st.latest.Version && (k.inc == 0 || w == 0 || k.inc == w) {
			rows = append(rows, st.rows[k].records()...)
		}
	}
	return rows
}

// writer is the incarnation that wrote version v in latest's lineage: the
// last to open before v; 0 (any) where the lineage does not reach, as in
// a task opened before the store kept one.
func writer(latest *wire.RainstormCheckpoint, v uint64) uint64 {
	var w uint64
	for _, o := range latest.Opened {
		if o.Version < v {
			w = o.Incarnation
		}
	}
	return w
}

// Header returns the input header a pipeline's source recorded.
func (s *Store) Header(job, workflow string) ([]string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.headers[[2]string{job, workflow}]
	return h.Header, ok && h.HasHeader
}

// apply records written changes and headers in memory.
func (s *Store) apply(cs []change, hs []wire.RainstormHeader) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range cs {
		if st := s.tasks[ch.next.Task]; st != nil {
			if newer(st.latest, ch.next) {
				// An open's parts of the version replaced are never cut again.
				s.openParts.drop(ch.next.Task, verOf(st.latest))
			}
			st.note(ch)
		}
		s.applyLocked(ch.next, ch.nextState, ch.rows)
	}
	for _, h := range hs {
		s.headers[[2]string{h.Job, h.Workflow}] = h
	}
}

// store persists then applies whole states; peers and a syncing leader
// use it.
func (s *Store) store(cs []*wire.RainstormCheckpoint, hs []wire.RainstormHeader) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	changes := make([]change, 0, len(cs))
	cur := map[wire.RainstormTask]snap{}
	for _, c := range cs {
		changes = append(changes, s.wholeChange(cur, c))
	}
	hs = s.newest(hs)
	if err := s.persist(changes, hs); err != nil {
		return err
	}
	s.apply(changes, hs)
	return nil
}

// stateKey is where one entry of task k's key group g is kept.
func stateKey(k []byte, g int, key string) []byte {
	out := make([]byte, 0, len(k)+1+len(key))
	out = append(append(out, k...), byte(g))
	return append(out, key...)
}

// wholeChange is the change that makes c, a whole checkpoint (its Groups
// every entry of its state), task's latest after cur (the changes before
// it in the same write) or the stored state, and records it in cur when
// it is newer. Under wmu.
func (s *Store) wholeChange(cur map[wire.RainstormTask]snap, c *wire.RainstormCheckpoint) change {
	prev, ok := cur[c.Task]
	if !ok {
		prev.head, prev.state = s.head(c.Task)
	}
	head := *c
	head.Groups = nil
	ch := change{prev: prev.head, next: &head, prevState: prev.state, nextState: prev.state}
	if newer(prev.head, c) { // else only its rows are written
		ch.nextState, ch.delta = prev.state.diff(c.Groups)
		cur[c.Task] = snap{&head, ch.nextState}
	}
	return ch
}

// wholeOf is ch's next checkpoint with its whole aggregate state: what a
// peer that does not hold ch's base is sent.
func wholeOf(ch change) *wire.RainstormCheckpoint {
	if ch.nextState == nil {
		return ch.next
	}
	c := *ch.next
	c.Groups = ch.nextState.whole()
	return &c
}

// writeState writes task k's entries that ch changes: each key of its
// delta with its value in ch.nextState, or deleted where that has none (a
// key a whole state dropped, or the revert of a key's first value).
func writeState(b *bolt.Bucket, k []byte, ch change) error {
	if ch.prevState == ch.nextState {
		return nil // an open, or a checkpoint that changed no key
	}
	for _, gs := range ch.delta {
		for i := range gs.Entries {
			key := stateKey(k, gs.Group, gs.Entries[i].Key)
			e, ok := ch.nextState.get(gs.Group, gs.Entries[i].Key)
			if !ok {
				if err := b.Delete(key); err != nil {
					return err
				}
				continue
			}
			v, err := wire.Marshal(&wire.RainstormAggregate{Count: e.Count, Sum: e.Sum})
			if err != nil {
				return err
			}
			if err := b.Put(key, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// loadState reads task k's entries back (bbolt's byte order is the
// entries' order).
func loadState(b *bolt.Bucket, k []byte) (*aggState, error) {
	var t *btree.BTreeG[item]
	c := b.Cursor()
	for key, v := c.Seek(k); key != nil && bytes.HasPrefix(key, k) && len(key) > len(k); key, v = c.Next() {
		g := key[len(k)]
		var e wire.RainstormAggregate
		if err := wire.Unmarshal(v, &e); err != nil {
			return nil, fmt.Errorf("state entry of group %d: %w", g, err)
		}
		e.Key = string(key[len(k)+1:])
		if t == nil {
			t = btree.NewG(stateDegree, itemLess)
		}
		t.ReplaceOrInsert(item{group: g, e: e})
	}
	if t == nil {
		return nil, nil
	}
	return &aggState{t: t}, nil
}
