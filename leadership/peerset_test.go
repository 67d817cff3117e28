package leadership

import (
	"context"
	"testing"
	"time"
)

// A change of the group lands between two quorum decisions: a learner's
// sync is answered only once every write begun under an older peer set has
// been sent, and a decision keeps the set it started with.
func TestPeerViewSettlesBeforeALearnerIsServed(t *testing.T) {
	conf := func(epoch uint64, voters []string, learners ...string) *PeerSet {
		c := &Configuration{Epoch: epoch}
		for _, id := range voters {
			c.Members = append(c.Members, Member{ID: id, QUIC: id})
		}
		for _, id := range learners {
			c.Learners = append(c.Learners, Member{ID: id, QUIC: id})
		}
		return NewPeerSet("m1", c)
	}
	three := []string{"m1", "m2", "m3"}
	g := NewPeerView(conf(0, three))
	old, release := g.Hold()
	if !g.Set(conf(1, three, "m4")) {
		t.Fatal("a newer set was not taken")
	}
	if g.Set(conf(0, three)) {
		t.Fatal("an older set replaced a newer one")
	}
	if len(old.LearnerIDs) != 0 || old.Quorum != 2 {
		t.Fatalf("a decision's set changed under it: %+v", old)
	}
	cur := g.Load()
	if cur.LearnerIDs[0] != "m4" || cur.Quorum != 2 || cur.IsPeer("m4") != true || len(cur.VoterIDs) != 2 {
		t.Fatalf("learner set: %+v", cur)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := g.Settled(ctx); err == nil {
		t.Fatal("settled while a decision under the older set is still sending")
	}
	done := make(chan error, 1)
	go func() {
		_, err := g.Settled(context.Background())
		done <- err
	}()
	release()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not settled after the last older decision ended")
	}
	// A decision under the current set does not hold a learner back.
	_, release = g.Hold()
	defer release()
	if _, err := g.Settled(context.Background()); err != nil {
		t.Fatal(err)
	}
}
