package manager

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/wire"
)

// After intakes in a row time out without a majority, a new submission is
// refused at once with no_quorum and a Retry-After: no peer is asked, and
// nothing is stored. Once the peers answer again, a probe's intake closes
// the breaker and submissions are stored as before.
func TestIntakeFailsFastWithoutAQuorum(t *testing.T) {
	loss := &lossControl{}
	c := newLossyCluster(t, 3, func(cfg *Config) { cfg.QuorumTimeout = 300 * time.Millisecond }, loss)
	l := c.leader()
	for _, id := range others(c, l.ID()) {
		loss.set(wire.TypeReplicateJob, id, lossDrop)
	}
	submit := func(id string) error {
		sub := sleepJob(t, id, 1, 1, 10*time.Millisecond)
		sub.JobID = id
		_, err := l.Submit(context.Background(), sub)
		return err
	}
	for i := range intakeBreakerFailures {
		if err := submit(fmt.Sprintf("j-lost-%d", i)); !errors.Is(err, wire.ErrOutcomeUnknown) {
			t.Fatalf("submission %d with every peer silent: %v, want outcome unknown after the quorum timeout", i, err)
		}
	}
	asked := loss.sent(wire.TypeReplicateJob)
	err := submit("j-fast")
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeNoQuorum || we.RetryAfter <= 0 {
		t.Fatalf("submission after %d intakes without a majority: %v, want no_quorum with a retry-after", intakeBreakerFailures, err)
	}
	if n := loss.sent(wire.TypeReplicateJob) - asked; n != 0 {
		t.Fatalf("the refused submission asked peers %d times, want none (refused at once)", n)
	}
	if _, err := l.Job(context.Background(), "j-fast"); wire.CodeOf(err) != wire.CodeNotFound {
		t.Fatalf("a job refused at once is known to the leader: %v", err)
	}
	if got := l.intakeCB.state(); got != 2 {
		t.Fatalf("intake breaker state %v, want 2 (open)", got)
	}
	if l.intakeCB.fastRefusals.Load() != 1 {
		t.Fatalf("fast refusals %d, want 1", l.intakeCB.fastRefusals.Load())
	}

	loss.clear()
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error { return submit("j-probe") })
	if got := l.intakeCB.state(); got != 0 {
		t.Fatalf("intake breaker state %v after a probe reached a majority, want 0 (closed)", got)
	}
	if err := submit("j-after"); err != nil {
		t.Fatalf("submission once the breaker closed: %v", err)
	}
}
