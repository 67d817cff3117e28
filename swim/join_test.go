package swim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/wire"
)

func TestKeepJoiningRetriesUntilASeedAnswers(t *testing.T) {
	calls := 0
	join := func(_ context.Context, seeds []string) (int, error) {
		calls++
		if calls < 3 {
			return 0, errors.New("refused")
		}
		return len(seeds), nil
	}
	if !KeepJoining(context.Background(), join, []string{"a", "b"}, time.Millisecond, 4*time.Millisecond, "test cluster", slog.New(slog.DiscardHandler)) || calls != 3 {
		t.Fatalf("joined after %d calls, want 3", calls)
	}
}

func TestKeepJoiningStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	join := func(context.Context, []string) (int, error) { return 0, errors.New("refused") }
	if KeepJoining(ctx, join, []string{"a"}, time.Millisecond, 2*time.Millisecond, "test cluster", slog.New(slog.DiscardHandler)) {
		t.Fatal("joined with every seed refusing")
	}
}

// A node's own address among its seeds is not a join: memberlist answers
// it, and a node restarted while its peers were cut off took that answer
// for the cluster's and stopped trying, alone for good.
func TestJoinDoesNotCountItsOwnAddress(t *testing.T) {
	t.Cleanup(func() { quiesce(t) })
	a := startNode(t, testConfig(t, "a", wire.RoleManager))
	dead := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	if n, err := a.Join(context.Background(), []string{a.Addr(), dead}); err == nil {
		t.Errorf("join of itself and an address nobody listens on succeeded (%d contacted)", n)
	}
	if n, err := a.Join(context.Background(), []string{a.Addr()}); err != nil || n != 0 {
		t.Errorf("join of itself alone: %d contacted, %v; want 0 and no error (a cluster of one)", n, err)
	}
}

// A seed that is not a live member is contacted again: here one that
// comes up only after the node joined another seed, the way a peer both
// sides declared dead during a partition is, once the partition heals.
func TestKeepJoinedContactsASeedThatIsNotAMember(t *testing.T) {
	t.Cleanup(func() { quiesce(t) })
	a := startNode(t, testConfig(t, "a", wire.RoleManager))
	b := startNode(t, testConfig(t, "b", wire.RoleWorker))
	lateCfg := testConfig(t, "late", wire.RoleWorker)
	late := fmt.Sprintf("127.0.0.1:%d", lateCfg.BindPort)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.KeepJoined(ctx, []string{a.Addr(), late}, time.Millisecond, 10*time.Millisecond, "test cluster", testLogger(t))
	}()
	t.Cleanup(func() { cancel(); <-done })
	waitMembers(t, []*testNode{a, b}, 2)
	c := startNode(t, lateCfg) // joins nobody itself
	waitMembers(t, []*testNode{a, b, c}, 3)
}
