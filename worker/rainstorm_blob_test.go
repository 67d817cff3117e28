package worker

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A source that opens while its worker knows no manager leader (it is
// registering again after SWIM took the leader for dead) waits for one
// instead of failing, and with it the job; it gives up only when its task
// ends.
func TestSourceBlobWaitsForALeader(t *testing.T) {
	w := &Worker{leader: newLeaderTracker()}
	r := &rsBlobReader{ctx: context.Background(), w: w}
	got := make(chan string, 1)
	go func() {
		addr, err := r.leaderAddr()
		if err != nil {
			t.Error(err)
		}
		got <- addr
	}()
	select {
	case addr := <-got:
		t.Fatalf("answered %q with no leader known", addr)
	case <-time.After(50 * time.Millisecond):
	}
	w.leader.set("m1", "127.0.0.1:7001", 1)
	select {
	case addr := <-got:
		if addr != "127.0.0.1:7001" {
			t.Fatalf("leader address %q", addr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still waiting after a leader became known")
	}

	ctx, cancel := context.WithCancelCause(context.Background())
	stopped := errors.New("task stopped")
	cancel(stopped)
	w.leader.lost("127.0.0.1:7001")
	r = &rsBlobReader{ctx: ctx, w: w}
	if _, err := r.leaderAddr(); !errors.Is(err, stopped) {
		t.Fatalf("a stopped task's wait ended with %v, want its cause", err)
	}
}
