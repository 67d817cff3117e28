package lifecycle

import (
	"context"
	"errors"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/transport"
	"tempest/wire"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

// Close refuses new goroutines and handlers, ends the context, and Wait
// waits for what was let in before.
func TestCloseStopsNewWorkAndWaitsForOld(t *testing.T) {
	o := New()
	if err := o.Start(); err != nil {
		t.Fatal(err)
	}
	if err := o.Start(); !errors.Is(err, ErrNotRunnable) {
		t.Fatalf("second Start = %v", err)
	}
	hub := transport.NewHub()
	server, client := hub.Node("s"), hub.Node("c")
	defer server.Close()
	defer client.Close()
	release := make(chan struct{})
	entered := make(chan struct{})
	Handle(o, server, "test role", wire.TypePing, func(ctx context.Context, _ transport.Peer, p *wire.Ping) (wire.Message, error) {
		close(entered)
		<-release
		return &wire.Pong{Seq: p.Seq}, nil
	})
	ended := make(chan struct{})
	if !o.Go(func(ctx context.Context) { <-ctx.Done(); close(ended) }) {
		t.Fatal("Go refused before Close")
	}
	called := make(chan error, 1)
	go func() {
		_, err := client.Call(context.Background(), "s", &wire.Ping{Seq: 1})
		called <- err
	}()
	<-entered
	first, running := o.Close()
	if !first || !running {
		t.Fatalf("Close = %v, %v", first, running)
	}
	if again, _ := o.Close(); again {
		t.Fatal("second Close reported first")
	}
	<-ended // the context ended
	if o.Go(func(context.Context) {}) {
		t.Fatal("Go accepted after Close")
	}
	_, err := client.Call(context.Background(), "s", &wire.Ping{Seq: 2})
	if wire.CodeOf(err) != wire.CodeUnavailable {
		t.Fatalf("a message after Close: %v, want unavailable", err)
	}
	waited := make(chan struct{})
	go func() { o.Wait(); close(waited) }()
	select {
	case <-waited:
		t.Fatal("Wait returned while a handler ran")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-waited
	if err := <-called; err != nil {
		t.Fatalf("the handler let in before Close: %v", err)
	}
}

func TestEveryCallsUntilTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := make(chan struct{}, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, time.Millisecond, func() { calls <- struct{}{} })
	}()
	for range 3 {
		select {
		case <-calls:
		case <-time.After(10 * time.Second):
			t.Fatal("no call within 10s")
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Every still running after its context ended")
	}
}
