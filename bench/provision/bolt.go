package main

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The bbolt micro-benchmark: what one fsync'd commit costs on this disk,
// and how many writes a commit can carry, for the ways a manager could
// write. Every cell opens a fresh file in -bolt-dir (by default next to the
// cluster's data, on the same file system) and runs N writer goroutines,
// each putting one value of -bolt-value bytes per operation under an
// increasing key (store keys are snowflake-ordered too), for -bolt-duration
// after a short warm-up.
//
// Modes:
//
//	update     db.Update per write: one transaction, one commit (two fdatasyncs) per write.
//	batch-2ms  db.Batch with MaxBatchDelay 2 ms, what store.Open configures: the first
//	           writer of a batch waits 2 ms for others to join, then one commit carries all.
//	batch-0    db.Batch with MaxBatchDelay 0: the batch starts at once, so it rarely
//	           holds more than the writers that arrived in the same instant.
//	group      a committer goroutine that takes every write queued while the previous
//	           commit ran and commits them together: no timer, batches grow with load.
//	update-3db db.Update, the writers spread over 3 files: the devcluster's 3 managers
//	           share one disk here, so this shows how commits of separate files contend.
//	nosync     db.Update with NoSync: the commit without its fdatasyncs (diagnostic
//	           only, never for a manager), to separate disk from CPU.
var boltModes = []string{"update", "batch-2ms", "batch-0", "group", "update-3db", "nosync"}

type boltResult struct {
	Mode      string  `json:"mode"`
	Writers   int     `json:"writers"`
	Rep       int     `json:"rep"`
	Ops       int     `json:"ops"`
	Commits   int     `json:"commits"`
	OpsPerSec float64 `json:"ops_per_sec"`
	// CommitsPerSec and OpsPerCommit describe the transactions written.
	CommitsPerSec float64 `json:"commits_per_sec"`
	OpsPerCommit  float64 `json:"ops_per_commit"`
	Latency       dist    `json:"latency"`
}

var boltBucket = []byte("b")

// groupCommitter is the "group" mode: writers queue, one goroutine commits
// everything queued so far in one Update.
type groupCommitter struct {
	db      *bolt.DB
	ch      chan groupReq
	commits atomic.Int64
	done    chan struct{}
}

type groupReq struct {
	key, val []byte
	err      chan error
}

func newGroupCommitter(db *bolt.DB) *groupCommitter {
	g := &groupCommitter{db: db, ch: make(chan groupReq, 4096), done: make(chan struct{})}
	go g.run()
	return g
}

func (g *groupCommitter) run() {
	defer close(g.done)
	for first := range g.ch {
		reqs := []groupReq{first}
	drain:
		for {
			select {
			case r, ok := <-g.ch:
				if !ok {
					break drain
				}
				reqs = append(reqs, r)
			default:
				break drain
			}
		}
		err := g.db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket(boltBucket)
			for _, r := range reqs {
				if err := b.Put(r.key, r.val); err != nil {
					return err
				}
			}
			return nil
		})
		g.commits.Add(1)
		for _, r := range reqs {
			r.err <- err
		}
	}
}

func (g *groupCommitter) put(key, val []byte) error {
	errc := make(chan error, 1)
	g.ch <- groupReq{key: key, val: val, err: errc}
	return <-errc
}

func (g *groupCommitter) close() {
	close(g.ch)
	<-g.done
}

func boltCell(dir, mode string, writers, rep, valSize int, warm, dur time.Duration) (boltResult, error) {
	res := boltResult{Mode: mode, Writers: writers, Rep: rep}
	cellDir, err := os.MkdirTemp(dir, "bolt-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(cellDir)
	files := 1
	if mode == "update-3db" {
		files = 3
	}
	var dbs []*bolt.DB
	for i := range files {
		db, err := bolt.Open(filepath.Join(cellDir, fmt.Sprintf("bench-%d.db", i)), 0o600, &bolt.Options{Timeout: time.Second})
		if err != nil {
			return res, err
		}
		defer db.Close()
		if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket(boltBucket); return err }); err != nil {
			return res, err
		}
		dbs = append(dbs, db)
	}
	db := dbs[0]
	switch mode {
	case "batch-2ms":
		db.MaxBatchDelay = 2 * time.Millisecond
	case "batch-0":
		db.MaxBatchDelay = 0
	case "nosync":
		db.NoSync = true
	}
	var g *groupCommitter
	if mode == "group" {
		g = newGroupCommitter(db)
	}

	val := make([]byte, valSize)
	if _, err := io.ReadFull(rand.Reader, val); err != nil {
		return res, err
	}
	var seq atomic.Uint64
	var measuring, stop atomic.Bool
	var measureStart time.Time
	type writerOut struct {
		lat  []time.Duration
		txs  []int
		errs error
	}
	outs := make([]writerOut, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			o := &outs[i]
			for !stop.Load() {
				key := make([]byte, 8)
				binary.BigEndian.PutUint64(key, seq.Add(1))
				counted := measuring.Load()
				start := time.Now()
				txid := -1
				put := func(tx *bolt.Tx) error {
					txid = tx.ID()
					return tx.Bucket(boltBucket).Put(key, val)
				}
				var err error
				switch mode {
				case "update", "nosync":
					err = db.Update(put)
				case "update-3db":
					err = dbs[i%len(dbs)].Update(put)
				case "batch-2ms", "batch-0":
					err = db.Batch(put)
				case "group":
					err = g.put(key, val)
				default:
					err = fmt.Errorf("unknown mode %q", mode)
				}
				if err != nil {
					o.errs = err
					return
				}
				if counted {
					o.lat = append(o.lat, time.Since(start))
					o.txs = append(o.txs, txid)
				}
			}
		})
	}
	time.Sleep(warm)
	measureStart = time.Now()
	measuring.Store(true)
	groupBase := int64(0)
	if g != nil {
		groupBase = g.commits.Load()
	}
	time.Sleep(dur)
	stop.Store(true)
	elapsed := time.Since(measureStart)
	wg.Wait()
	if g != nil {
		res.Commits = int(g.commits.Load() - groupBase)
		g.close()
	}

	var lat []time.Duration
	// Transaction ids are per file.
	txs := make(map[[2]int]struct{})
	for i, o := range outs {
		if o.errs != nil {
			return res, o.errs
		}
		lat = append(lat, o.lat...)
		for _, t := range o.txs {
			txs[[2]int{i % files, t}] = struct{}{}
		}
	}
	res.Ops = len(lat)
	if g == nil {
		res.Commits = len(txs)
	}
	res.OpsPerSec = float64(res.Ops) / elapsed.Seconds()
	res.CommitsPerSec = float64(res.Commits) / elapsed.Seconds()
	if res.Commits > 0 {
		res.OpsPerCommit = float64(res.Ops) / float64(res.Commits)
	}
	res.Latency = summarize(lat)
	return res, nil
}

// runBolt runs every (mode, writers) cell reps times, rotating the order of
// the modes from one rep to the next so noise falls on all alike.
func runBolt(dir string, writers []int, reps, valSize int, dur time.Duration) ([]boltResult, error) {
	var out []boltResult
	for rep := range reps {
		for _, n := range writers {
			for k := range boltModes {
				mode := boltModes[(k+rep)%len(boltModes)]
				r, err := boltCell(dir, mode, n, rep, valSize, 150*time.Millisecond, dur)
				if err != nil {
					return out, fmt.Errorf("bolt %s × %d: %w", mode, n, err)
				}
				out = append(out, r)
				logf("bolt rep %d %-9s writers=%-3d %8.0f ops/s %7.0f commits/s %5.1f ops/commit p50 %s ms p99 %s ms",
					rep+1, mode, n, r.OpsPerSec, r.CommitsPerSec, r.OpsPerCommit, msf(r.Latency.P50), msf(r.Latency.P99))
			}
		}
	}
	return out, nil
}

// boltSummary is the median over reps of one (mode, writers) cell.
type boltSummary struct {
	Mode          string  `json:"mode"`
	Writers       int     `json:"writers"`
	OpsPerSec     float64 `json:"ops_per_sec"`
	CommitsPerSec float64 `json:"commits_per_sec"`
	OpsPerCommit  float64 `json:"ops_per_commit"`
	P50           time.Duration
	P99           time.Duration
}

func summarizeBolt(rs []boltResult, writers []int) []boltSummary {
	var out []boltSummary
	for _, n := range writers {
		for _, mode := range boltModes {
			var ops, commits, per, p50, p99 []float64
			for _, r := range rs {
				if r.Mode == mode && r.Writers == n {
					ops = append(ops, r.OpsPerSec)
					commits = append(commits, r.CommitsPerSec)
					per = append(per, r.OpsPerCommit)
					p50 = append(p50, float64(r.Latency.P50))
					p99 = append(p99, float64(r.Latency.P99))
				}
			}
			if len(ops) == 0 {
				continue
			}
			out = append(out, boltSummary{
				Mode: mode, Writers: n,
				OpsPerSec: median(ops), CommitsPerSec: median(commits), OpsPerCommit: median(per),
				P50: time.Duration(median(p50)), P99: time.Duration(median(p99)),
			})
		}
	}
	return out
}
