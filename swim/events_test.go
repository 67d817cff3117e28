package swim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/wire"
)

// A stuck handler must not stall the producer (memberlist, holding its node
// lock), and cancelling must stop delivery.
func TestEventQueueNeverBlocksProducer(t *testing.T) {
	release := make(chan struct{})
	var delivered atomic.Int64
	q := newEventQueue(EventHandler{OnJoin: func(NodeInfo) {
		delivered.Add(1)
		<-release
	}}, testLogger(t))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { q.run(ctx) })

	const n = 5000
	done := make(chan struct{})
	go func() {
		for i := range n {
			q.push(event{kind: eventJoin, node: NodeInfo{Name: fmt.Sprint(i)}})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("push blocked behind a stuck handler")
	}
	cancel()
	close(release)
	wg.Wait()
	if d := delivered.Load(); d >= n {
		t.Errorf("all %d events delivered after cancel", d)
	}
}

func TestEventsArriveInOrder(t *testing.T) {
	var mu sync.Mutex
	var got []string
	h := EventHandler{
		OnJoin:   func(n NodeInfo) { mu.Lock(); got = append(got, "join "+n.Name); mu.Unlock() },
		OnUpdate: func(n NodeInfo) { mu.Lock(); got = append(got, "update "+n.Name); mu.Unlock() },
		OnDead:   func(n NodeInfo) { mu.Lock(); got = append(got, "dead "+n.Name); mu.Unlock() },
	}
	q := newEventQueue(h, testLogger(t))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { q.run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	q.push(event{kind: eventJoin, node: NodeInfo{Name: "a"}})
	q.push(event{kind: eventUpdate, node: NodeInfo{Name: "a"}})
	q.push(event{kind: eventDead, node: NodeInfo{Name: "a"}})
	q.push(event{kind: eventJoin, node: NodeInfo{Name: "a"}})
	want := []string{"join a", "update a", "dead a", "join a"}
	testutil.Eventually(t, 2*time.Second, 5*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("got %v, want %v", got, want)
		}
		return nil
	})
}

// Callbacks run off memberlist's goroutines, so they may call back into the
// Node (memberlist holds its node lock while notifying; calling Members
// from there directly would deadlock).
func TestCallbacksMayCallNode(t *testing.T) {
	t.Cleanup(func() { quiesce(t) })
	var node atomic.Pointer[Node]
	seen := make(chan int, 4)
	cfg := testConfig(t, "a", wire.RoleManager)
	cfg.Events = EventHandler{OnJoin: func(NodeInfo) {
		if n := node.Load(); n != nil {
			seen <- len(n.Members())
			if err := n.UpdateMeta(NodeMeta{Role: wire.RoleManager, Datacenter: "dc2"}); err != nil && !errors.Is(err, ErrShutdown) {
				t.Errorf("update meta from callback: %v", err)
			}
		}
	}}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	node.Store(a)
	defer a.Shutdown()
	b := startNode(t, testConfig(t, "b", wire.RoleWorker))
	if _, err := b.Join(context.Background(), []string{a.Addr()}); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-seen:
		if n != 2 {
			t.Errorf("callback saw %d members", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OnJoin never ran")
	}
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if m, _ := b.Member("a"); m.Meta.Datacenter != "dc2" {
			return fmt.Errorf("b sees a in %q", m.Meta.Datacenter)
		}
		return nil
	})
}
