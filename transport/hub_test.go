package transport

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/wire"
)

func TestHubPartitionHealAndDrop(t *testing.T) {
	hub := NewHub(WithSeed(7))
	nodes := map[string]Transport{}
	var oneway atomic.Int64
	for _, id := range []string{"a", "b", "c"} {
		n := hub.Node(id)
		t.Cleanup(func() { n.Close() })
		nodes[id] = n
		n.Handle(wire.TypePing, func(ctx context.Context, from Peer, msg wire.Message) (wire.Message, error) {
			if from.NodeID == "" {
				return nil, errors.New("no sender")
			}
			oneway.Add(1)
			return &wire.Pong{Seq: msg.(*wire.Ping).Seq}, nil
		})
	}
	ctx := context.Background()
	reach := func(from, to string) error {
		_, err := nodes[from].Call(ctx, to, &wire.Ping{Seq: 1})
		return err
	}
	cases := []struct {
		name   string
		setup  func()
		from   string
		to     string
		wantOK bool
	}{
		{"connected", func() {}, "a", "b", true},
		{"partitioned apart", func() { hub.Partition([]string{"a"}, []string{"b", "c"}) }, "a", "b", false},
		{"same side of partition", func() {}, "b", "c", true},
		{"healed", hub.Heal, "a", "b", true},
		{"isolated", func() { hub.Isolate("c") }, "a", "c", false},
		{"others unaffected by isolation", func() {}, "a", "b", true},
		{"isolated node cannot call out", func() {}, "c", "b", false},
		{"heal after isolation", hub.Heal, "c", "b", true},
		{"all dropped", func() { hub.SetDropRate(1) }, "a", "b", false},
		{"drop off", func() { hub.SetDropRate(0) }, "a", "b", true},
		{"unknown node", func() {}, "a", "zz", false},
	}
	for _, tc := range cases {
		tc.setup()
		err := reach(tc.from, tc.to)
		if tc.wantOK && err != nil {
			t.Fatalf("%s: %s -> %s: %v", tc.name, tc.from, tc.to, err)
		}
		if !tc.wantOK && !errors.Is(err, ErrUnreachable) {
			t.Fatalf("%s: %s -> %s: want ErrUnreachable, got %v", tc.name, tc.from, tc.to, err)
		}
	}

	// One-way messages into a partition vanish without an error, as on a
	// real network; across a healed one they arrive.
	before := oneway.Load()
	hub.Partition([]string{"a"}, []string{"b"})
	if err := nodes["a"].Send(ctx, "b", &wire.Ping{}); err != nil {
		t.Fatalf("send into partition: %v", err)
	}
	hub.Heal()
	if err := nodes["a"].Send(ctx, "b", &wire.Ping{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Second, 5*time.Millisecond, func() error {
		if got := oneway.Load() - before; got != 1 {
			return fmt.Errorf("one-way deliveries %d, want 1", got)
		}
		return nil
	})
}

func TestHubHookAndTypedErrors(t *testing.T) {
	hub := NewHub()
	a, b := hub.Node("a"), hub.Node("b")
	defer a.Close()
	defer b.Close()
	b.Handle(wire.TypeJobSubmission, func(ctx context.Context, from Peer, msg wire.Message) (wire.Message, error) {
		return nil, wire.Errorf(wire.CodeNoQuorum, "1 of 3")
	})
	var seen atomic.Int64
	hub.SetHook(func(from, to string, msg wire.Message) bool {
		seen.Add(1)
		return msg.Type() != wire.TypeCancelJob
	})
	ctx := context.Background()
	if _, err := a.Call(ctx, "b", &wire.JobSubmission{JobID: "j"}); !errors.Is(err, wire.ErrNoQuorum) {
		t.Fatalf("want typed no-quorum error, got %v", err)
	}
	if _, err := a.Call(ctx, "b", &wire.CancelJob{JobID: "j"}); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("hooked drop: want ErrUnreachable, got %v", err)
	}
	if _, err := a.Call(ctx, "b", &wire.Ping{}); wire.CodeOf(err) != wire.CodeNoHandler {
		t.Fatalf("want no-handler, got %v", err)
	}
	if seen.Load() != 3 {
		t.Fatalf("hook saw %d messages, want 3", seen.Load())
	}
	b.Close()
	if _, err := a.Call(ctx, "b", &wire.Ping{}); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("closed node: want ErrUnreachable, got %v", err)
	}
	if _, err := b.Call(ctx, "a", &wire.Ping{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("call from closed node: want ErrClosed, got %v", err)
	}
}
