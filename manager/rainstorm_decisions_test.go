package manager

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"tempest/api"
	"tempest/internal/testutil"
	"tempest/rainstorm"
	"tempest/wire"
)

// A decision whose record missed its majority is dropped, but the record
// may be on some managers: here a peer stored it and its answer was lost.
// The term's next write must supersede that copy on every manager. Under
// the same (term, write) number it tied with it, and the peer kept the
// dropped decision, for a later leader's sync to bring back and carry out
// though the source was never asked for it.
func TestRainstormDroppedDecisionIsSupersededEverywhere(t *testing.T) {
	loss := &lossControl{}
	c, lead, sp := lossyScaled(t, 500*time.Millisecond, loss)
	key, term := rsPipeKey{sp.job, "pipe"}, lead.leading().Number()
	record := func() *wire.RainstormScale {
		lead.rsScale.mu.Lock()
		defer lead.rsScale.mu.Unlock()
		return rsScaleRecordLocked(lead.rsScale.pipeNoTermLocked(key), term)
	}

	// A decision: one peer stores it, its answer lost; the other never
	// gets it.
	peers := others(c, lead.ID())
	loss.set(wire.TypeRainstormReplicate, peers[0], lossReply)
	loss.set(wire.TypeRainstormReplicate, peers[1], lossDrop)
	dropped := api.PipelineResize{At: time.Now(), Stage: "count", From: 1, To: 2, Decision: "dropped", Epoch: 1}
	rec := record()
	rec.Want, rec.Resizes = []int{2}, append(rec.Resizes, rsResizeToWire(dropped))
	if lead.rsStoreScale(context.Background(), term, key, rsScaleWrite{rec: rec, decided: &dropped}) {
		t.Fatal("a record one manager of three acknowledged was taken as stored")
	}
	if sc := c.manager(peers[0]).rs.Scale(sp.job, "pipe"); sc == nil || len(sc.Want) == 0 {
		t.Fatalf("the peer whose answer was lost holds %+v, want the dropped decision", sc)
	}
	loss.clear()

	// The term's next write, with no decision.
	next := record()
	if !lead.rsStoreScale(context.Background(), term, key, rsScaleWrite{rec: next}) {
		t.Fatal("the next record was not stored")
	}
	for _, m := range c.running() {
		sc := m.rs.Scale(sp.job, "pipe")
		if sc == nil || len(sc.Want) > 0 || len(sc.Resizes) > 0 {
			t.Fatalf("%s holds %+v after the term's next write, want the record without the dropped decision", m.ID(), sc)
		}
	}
}

// A wanted size is the last decision's, for the epoch after those the
// source recorded when it was taken: a new leader continues it only while
// the source records no other epoch, and never before storing it again.
func TestRainstormInheritedSizesFollowTheSourcesEpochs(t *testing.T) {
	start := []wire.RainstormEpoch{{Tasks: []int{1}}}
	grown := append(slices.Clone(start), wire.RainstormEpoch{Epoch: 1, Segment: 4, Tasks: []int{2}})
	sc := &wire.RainstormScale{Term: 3, Seq: 2, Want: []int{2}, Resizes: []wire.RainstormResize{{Stage: "count", From: 1, To: 2, Epoch: 1}}}
	for _, tc := range []struct {
		name    string
		sc      *wire.RainstormScale
		epochs  []wire.RainstormEpoch
		inherit []int
	}{
		{"not recorded yet", sc, start, []int{2}},
		{"recorded", sc, grown, nil},
		{"the source moved on", &wire.RainstormScale{Term: 3, Seq: 2, Want: []int{3},
			Resizes: []wire.RainstormResize{{Stage: "count", From: 1, To: 3, Epoch: 1}}}, grown, nil},
		{"no decision", &wire.RainstormScale{Term: 3, Seq: 2}, start, nil},
	} {
		ps := &rsPipeScale{}
		rsLoadScaleLocked(ps, tc.sc, tc.epochs)
		if !slices.Equal(ps.inherit, tc.inherit) || ps.want != nil {
			t.Errorf("%s: inherits %v and wants %v, want to inherit %v and want nothing before it is stored", tc.name, ps.inherit, ps.want, tc.inherit)
		}
	}
}

// A leader that inherited sizes in one term and leads again in a later one
// reads the store afresh: when it holds no record for the pipeline (a sync
// met none on a majority), nothing is inherited. Kept from the earlier
// term, the sizes would be stored again and asked of the source on the
// word of a record that no longer exists.
func TestRainstormInheritedSizesDoNotOutliveTheirTerm(t *testing.T) {
	start := []wire.RainstormEpoch{{Tasks: []int{1}}}
	sc := &wire.RainstormScale{Term: 3, Seq: 2, Want: []int{2}, Resizes: []wire.RainstormResize{{Stage: "count", From: 1, To: 2, Epoch: 1}}}
	var s rsScaleState
	key := rsPipeKey{"job", "pipe"}
	ps := s.pipeLocked(key, 4)
	rsLoadScaleLocked(ps, sc, start)
	if !slices.Equal(ps.inherit, []int{2}) {
		t.Fatalf("term 4 inherits %v, want [2]", ps.inherit)
	}
	ps = s.pipeLocked(key, 6)
	if ps.loaded {
		t.Fatal("a new term starts loaded")
	}
	rsLoadScaleLocked(ps, nil, start)
	if ps.inherit != nil || ps.inheritAt != 0 {
		t.Fatalf("term 6, with no stored record, inherits %v at %d epochs, want nothing", ps.inherit, ps.inheritAt)
	}

	// A load over state that inherited, without a term change between
	// (the record gone from the store), drops it too.
	ps.inherit, ps.inheritAt = []int{2}, 1
	rsLoadScaleLocked(ps, nil, start)
	if ps.inherit != nil {
		t.Fatalf("a load with no stored record keeps %v", ps.inherit)
	}
}

// While a majority of the managers cannot be reached, the autoscaling
// record is not written every scale round: each write that misses a
// majority doubles the wait before the next, and the status says why the
// pipeline's autoscaling waits. Rounds are driven here with their own
// clock, five a second, so the count does not depend on the machine's
// speed; the background loop, on the real clock, finds the backoff set
// in its future and stays quiet.
func TestRainstormAutoscaleRecordWritesBackOffWithoutAMajority(t *testing.T) {
	loss := &lossControl{}
	c, lead, sp := lossyScaled(t, 200*time.Millisecond, loss)
	key, lt := rsPipeKey{sp.job, "pipe"}, lead.leading()
	term := lt.Number()
	var p rsScalePipe
	for _, q := range lead.rsResizablePipes() {
		if q.key == key {
			p = q
		}
	}
	if p.spec == nil {
		t.Fatal("the pipeline is not resizable")
	}
	latest := make([]*wire.RainstormCheckpoint, len(p.order))
	for i, task := range p.order {
		latest[i] = lead.rs.Head(task)
	}
	epochs, cur, _ := rsEpochsOf(p.spec, latest[0])

	for _, id := range others(c, lead.ID()) {
		loss.set(wire.TypeRainstormReplicate, id, lossDrop)
	}
	// A measured figure not stored yet: every round has a write to make.
	lead.rsScale.mu.Lock()
	lead.rsScale.pipes[key].figures++
	lead.rsScale.mu.Unlock()

	const rounds = 50 // ten seconds of scale rounds
	start := time.Now().Add(time.Minute)
	writes := 0
	for i := range rounds {
		at := start.Add(time.Duration(i) * rsObserveEvery)
		w := lead.rsAutoscale(lt, p, latest, 0, "", epochs, cur, false, at, i%5 == 4)
		if w.rec == nil {
			continue
		}
		writes++
		if lead.rsStoreScale(context.Background(), term, key, w) {
			t.Fatal("a record no peer stored was taken as stored")
		}
	}
	// Waits of 0.5-1 s, 1-2 s, 2-4 s, 4-8 s: at most five writes in ten
	// seconds.
	if writes == 0 || writes > 5 {
		t.Fatalf("%d writes of the record in %d rounds with no majority, want 1 to 5", writes, rounds)
	}
	if held := lead.rsScale.held(key, term); !strings.Contains(held, "missed a majority") {
		t.Fatalf("the autoscaling holds with %q, want the missed majority named", held)
	}

	// The majority back, the first round after the wait stores the figure
	// and writes at will again.
	loss.clear()
	at := start.Add(10 * time.Minute)
	w := lead.rsAutoscale(lt, p, latest, 0, "", epochs, cur, false, at, true)
	if w.rec == nil || !lead.rsStoreScale(context.Background(), term, key, w) {
		t.Fatal("the record was not stored once the majority was back")
	}
	lead.rsScale.mu.Lock()
	defer lead.rsScale.mu.Unlock()
	if ps := lead.rsScale.pipes[key]; ps.retry != (rsRetry{}) || ps.storedFigures != ps.figures {
		t.Fatalf("after a stored write the retry is %+v and %d of %d figures stored", ps.retry, ps.storedFigures, ps.figures)
	}
}

// lossyScaled is a cluster of three managers with loss between them and a
// quorum timeout of qt, running an autoscaled pipeline that never decides
// by itself, opened, and loaded by the leader's scale loop in its term.
func lossyScaled(t *testing.T, qt time.Duration, loss *lossControl) (*testCluster, *Manager, scaled) {
	t.Helper()
	c := newLossyCluster(t, 3, func(cfg *Config) { cfg.QuorumTimeout = qt }, loss)
	if err := c.reg.Register(idleRainstorm{}); err != nil {
		t.Fatal(err)
	}
	c.addWorker("w1", 4)
	lead := c.leader()
	sp := submitScaled(t, c, lead, rainstorm.Autoscale{Min: 1, Max: 3, Low: 0, High: 1e9})
	sp.openSourceAndCount()
	key, term := rsPipeKey{sp.job, "pipe"}, lead.leading().Number()
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		lead.rsScale.mu.Lock()
		defer lead.rsScale.mu.Unlock()
		if ps := lead.rsScale.pipes[key]; ps == nil || ps.term != term || !ps.loaded {
			return errors.New("the scale loop has not loaded the pipeline in this term")
		}
		return nil
	})
	return c, lead, sp
}
