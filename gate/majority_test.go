package gate

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/transport"
	"tempest/wire"
)

// A gate leader's changes reach the other gates before anyone acts on them.
// These tests drop the records a leader sends to its peers and check that a
// datacenter is neither acknowledged a job's end nor handed a taken-over
// lease that a successor reading a majority might not have: before, both
// went out one way, and a later leader showed an ended job running again
// or an older fence token (the chaos checker's resurrected and
// fence-regressed verdicts).

// blockRecords drops, while *on is set, every ReplicateGateRecord and
// every state sync asked of an elected gate (a follower catching up from
// its new leader): records then move between gates only when the gates'
// own sync reads them.
func blockRecords(hub *transport.Hub, hg **hubGates, on *atomic.Bool, also func(from, to string, msg wire.Message)) {
	hub.SetHook(func(from, to string, msg wire.Message) bool {
		if also != nil {
			also(from, to, msg)
		}
		if !on.Load() {
			return true
		}
		switch msg.(type) {
		case *wire.ReplicateGateRecord:
			return false
		case *wire.StateSyncRequest:
			g := (*hg).gates[to]
			if g == nil {
				return true
			}
			leader, _ := g.elector.Leader()
			return leader != to
		}
		return true
	})
}

// A datacenter's final report is answered only once the job's end is on a
// majority of gates; until then it is told no_quorum and reports again,
// and the successor of a leader that goes then shows the job ended.
func TestJobEndIsOnAMajorityBeforeItIsAcknowledged(t *testing.T) {
	hub := transport.NewHub()
	var block atomic.Bool
	var hg *hubGates
	blockRecords(hub, &hg, &block, nil)
	ids := []string{"g1", "g2", "g3"}
	hg = startHubGates(t, hub, ids, time.Minute)
	hg.observe(1)
	first := hg.leader(10*time.Second, ids...)
	ack, err := first.Submit(context.Background(), sleepJob())
	if err != nil {
		t.Fatal(err)
	}
	id := ack.JobID
	token := first.leases(id)[0].FenceToken
	east := hub.Node("east-1")
	defer east.Close()
	report := func(st wire.JobStatus) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := east.Call(ctx, first.ID(), &wire.JobProgress{JobID: id, Datacenter: "east", Status: st, TotalCompleted: 1, FenceToken: token})
		return err
	}
	if err := report(wire.JobRunning); err != nil {
		t.Fatal(err)
	}

	block.Store(true)
	if err := report(wire.JobCompleted); wire.CodeOf(err) != wire.CodeNoQuorum {
		t.Fatalf("final report while no other gate takes records: %v, want no_quorum (not acknowledged)", err)
	}
	block.Store(false)
	// The datacenter reports its end again, as a manager does until it is
	// acknowledged.
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error { return report(wire.JobCompleted) })

	hg.stop[first.ID()]()
	second := hg.leader(10*time.Second, othersThan(ids, first.ID())...)
	if st := waitJob(t, second, id, 10*time.Second); st.Status != wire.JobCompleted {
		t.Fatalf("the next leader shows the job %s (%s), want COMPLETED", st.Status, st.Error)
	}
}

// A new leader hands a datacenter the lease it took over only once a
// majority of gates holds it, and does not serve before: with the old
// leader gone and its one peer taking no records, it tells no datacenter
// anything; once the peer takes records, every LeaseTransfer it sends
// carries a token that peer already holds.
func TestTakenOverLeasesReachAMajorityBeforeADatacenter(t *testing.T) {
	hub := transport.NewHub()
	var block atomic.Bool
	var hg *hubGates
	var mu sync.Mutex
	var transfers []uint64
	var early []string
	dropped := map[string]int{} // records sent while blocked, by sender
	blockRecords(hub, &hg, &block, func(from, to string, msg wire.Message) {
		if _, ok := msg.(*wire.ReplicateGateRecord); ok && block.Load() {
			mu.Lock()
			dropped[from]++
			mu.Unlock()
		}
		lt, ok := msg.(*wire.LeaseTransfer)
		if !ok {
			return
		}
		// Which gates hold this token (or a newer one) as the datacenter
		// is told of it; the sender counts.
		holders := 0
		for _, id := range hg.ids {
			if g := hg.gates[id]; g != nil {
				if ls := g.leases(lt.JobID); len(ls) == 1 && ls[0].FenceToken >= lt.NewFenceToken {
					holders++
				}
			}
		}
		mu.Lock()
		defer mu.Unlock()
		transfers = append(transfers, lt.NewFenceToken)
		if holders < 2 {
			early = append(early, fmt.Sprintf("%s sent token %#x to %s held by %d gate(s)", from, lt.NewFenceToken, to, holders))
		}
	})
	ids := []string{"g1", "g2", "g3"}
	hg = startHubGates(t, hub, ids, time.Minute)
	hg.observe(1)
	east := hub.Node("east-1")
	defer east.Close()
	first := hg.leader(10*time.Second, ids...)
	ack, err := first.Submit(context.Background(), sleepJob())
	if err != nil {
		t.Fatal(err)
	}
	id := ack.JobID
	before := first.leases(id)[0].FenceToken

	block.Store(true)
	hg.stop[first.ID()]()
	rest := othersThan(ids, first.ID())
	var elected *Gate
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		for _, g := range rest {
			if hg.gates[g].lead.Held() != nil {
				elected = hg.gates[g]
				return nil
			}
		}
		return fmt.Errorf("none of %v elected", rest)
	})
	// It took the lease over and tries to store it: it sends its peer the
	// record again (its takeover retries), and it must not serve meanwhile.
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if elected.IsLeader() {
			t.Fatalf("%s serves though the leases it took over are on no majority", elected.ID())
		}
		if ls := elected.leases(id); len(ls) != 1 || ls[0].FenceToken <= before {
			return fmt.Errorf("%s has not taken the lease over yet", elected.ID())
		}
		mu.Lock()
		defer mu.Unlock()
		if dropped[elected.ID()] < 2 {
			return fmt.Errorf("%s sent its peer %d records, want a retry", elected.ID(), dropped[elected.ID()])
		}
		return nil
	})
	block.Store(false)
	second := hg.leader(15*time.Second, elected.ID())
	after := second.leases(id)[0].FenceToken
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		for _, tok := range transfers {
			if tok == after {
				return nil
			}
		}
		return fmt.Errorf("no LeaseTransfer with token %#x yet (seen %#x)", after, transfers)
	})
	mu.Lock()
	defer mu.Unlock()
	if len(early) > 0 {
		t.Fatalf("a datacenter was told of a lease no majority held: %v", early)
	}
}
