package swim

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/wire"
)

// stuckSink is a log handler whose Handle blocks until release is called:
// stderr or a log file on a disk that has stopped answering.
type stuckSink struct {
	open    chan struct{}
	once    sync.Once
	entered atomic.Int64 // calls of Handle so far, finished or not

	mu      sync.Mutex
	records []slog.Record
}

func newStuckSink() *stuckSink { return &stuckSink{open: make(chan struct{})} }

func (s *stuckSink) release() { s.once.Do(func() { close(s.open) }) }

func (s *stuckSink) Enabled(context.Context, slog.Level) bool { return true }

func (s *stuckSink) Handle(_ context.Context, r slog.Record) error {
	s.entered.Add(1)
	<-s.open
	s.mu.Lock()
	s.records = append(s.records, r.Clone())
	s.mu.Unlock()
	return nil
}

func (s *stuckSink) WithAttrs([]slog.Attr) slog.Handler { return s }
func (s *stuckSink) WithGroup(string) slog.Handler      { return s }

func (s *stuckSink) messages() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.records))
	for i, r := range s.records {
		out[i] = r.Message
	}
	return out
}

// memberlist logs while holding its member lock (a refutation, for one),
// so a log write that blocks would stop probes, acks and refutations, and
// the node would be declared dead by its peers while alive. With every
// node's log sink stuck, a cluster must still form and still detect a
// crash.
func TestStuckLogSinkDoesNotStallMembership(t *testing.T) {
	t.Cleanup(func() { quiesce(t) })
	nodes := make([]*testNode, 3)
	sinks := make([]*stuckSink, len(nodes))
	for i := range nodes {
		cfg := testConfig(t, fmt.Sprintf("node-%d", i), wire.RoleWorker)
		sinks[i] = newStuckSink()
		cfg.Logger = slog.New(sinks[i])
		nodes[i] = startNode(t, cfg)
		// Registered after the node, so it runs before its Shutdown, which
		// waits for the queued records to be written.
		t.Cleanup(sinks[i].release)
	}

	joined := make(chan error, len(nodes)-1)
	for _, tn := range nodes[1:] {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := tn.Join(ctx, []string{nodes[0].Addr()})
			joined <- err
		}()
	}
	waitMembers(t, nodes, len(nodes))
	for range nodes[1:] {
		if err := <-joined; err != nil {
			t.Fatalf("join with a stuck log sink: %v", err)
		}
	}

	// The victim's sink is released so that its Shutdown, which writes
	// what it has queued, returns; the survivors' sinks stay stuck.
	victim := nodes[2]
	sinks[2].release()
	if err := victim.Shutdown(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*testTiming(t).DetectionBound(3), 10*time.Millisecond, func() error {
		for _, tn := range nodes[:2] {
			if _, ok := tn.rec.dead(victim.Name()); !ok {
				return fmt.Errorf("%s has not declared %s dead with its log sink stuck", tn.Name(), victim.Name())
			}
		}
		return nil
	})
}

// A caller of a queued logger never waits for the sink: records beyond the
// queue are dropped and counted, and once the sink drains, the records
// that were queued arrive in order with the time they were logged at,
// followed by a notice of how many were dropped.
func TestLogQueueNeverBlocksAndCountsDrops(t *testing.T) {
	sink := newStuckSink()
	t.Cleanup(sink.release)
	q := newLogQueue(8)
	q.report = sink
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { q.run(ctx) })
	t.Cleanup(func() {
		sink.release()
		cancel()
		wg.Wait()
	})

	log := newMemberlistLogger(slog.New(q.wrap(sink)))
	const lines = 100
	before := time.Now()
	// The first record is taken by the writer, which then blocks in the
	// sink; everything after it can only queue or be dropped.
	log.Printf("[WARN] memberlist: line 0")
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if s := sink.entered.Load(); s != 1 {
			return fmt.Errorf("the writer has not reached the sink (%d calls)", s)
		}
		return nil
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; i < lines; i++ {
			log.Printf("[WARN] memberlist: line %d", i)
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("a logger call blocked on a stuck sink")
	}
	// One record is held by the writer (blocked in the sink), eight are
	// queued; the rest must have been dropped.
	if got := q.total.Load(); got != lines-8-1 {
		t.Errorf("dropped %d records, want %d", got, lines-8-1)
	}

	sink.release()
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if n := len(sink.messages()); n != 10 {
			return fmt.Errorf("sink has %d records, want 9 lines and a drop notice", n)
		}
		return nil
	})
	msgs := sink.messages()
	for i := range 9 {
		if want := fmt.Sprintf("line %d", i); msgs[i] != want {
			t.Errorf("record %d is %q, want %q", i, msgs[i], want)
		}
	}
	sink.mu.Lock()
	first, notice := sink.records[0], sink.records[9]
	sink.mu.Unlock()
	if first.Level != slog.LevelWarn {
		t.Errorf("level %s, want WARN", first.Level)
	}
	if first.Time.Before(before) || first.Time.After(time.Now()) {
		t.Errorf("record time %s is not when it was logged", first.Time)
	}
	var dropped uint64
	notice.Attrs(func(a slog.Attr) bool {
		if a.Key == "dropped" {
			dropped = a.Value.Uint64()
		}
		return true
	})
	if notice.Level != slog.LevelWarn || dropped != lines-9 {
		t.Errorf("drop notice %q at %s reports %d dropped, want WARN and %d", notice.Message, notice.Level, dropped, lines-9)
	}
}
