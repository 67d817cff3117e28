package lifecycle

import (
	"context"
	"errors"
	"strings"
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

// Serve and Stop, the run and shutdown both roles share: Serve runs start
// and returns when its ctx ends or Stop begins, ending the background work;
// Stop waits for Serve (if it ran), calls stop, waits for every goroutine,
// and a second Stop waits for the first one's finish and reports false. A
// Serve after Stop, or twice, is refused.
func TestServeAndStop(t *testing.T) {
	for _, tc := range []struct {
		name    string
		serve   bool
		ctxEnds bool // Serve ends by its ctx before Stop
	}{
		{"stop ends a serving owner", true, false},
		{"the ctx ends Serve first", true, true},
		{"stop without serve", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := New()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			served := make(chan error, 1)
			bgEnded := make(chan struct{})
			if tc.serve {
				started := make(chan struct{})
				go func() {
					served <- o.Serve(ctx, func() {
						o.Go(func(ctx context.Context) { <-ctx.Done(); close(bgEnded) })
						close(started)
					})
				}()
				<-started
				if err := o.Serve(ctx, func() { t.Error("a second Serve ran start") }); !errors.Is(err, ErrNotRunnable) {
					t.Fatalf("second Serve = %v", err)
				}
			}
			if tc.ctxEnds {
				cancel()
				if err := <-served; err != nil {
					t.Fatal(err)
				}
				<-bgEnded // background work stopped with Serve
			}
			var order []string
			first, finish := o.Stop(func() { order = append(order, "stop") })
			if !first {
				t.Fatal("first Stop reported not first")
			}
			if tc.serve && !tc.ctxEnds {
				if err := <-served; err != nil {
					t.Fatal(err)
				}
			}
			second := make(chan bool, 1)
			go func() {
				again, _ := o.Stop(func() { order = append(order, "again") })
				second <- again
			}()
			select {
			case <-second:
				t.Fatal("a second Stop returned before the first one's finish")
			case <-time.After(50 * time.Millisecond):
			}
			finish()
			if <-second {
				t.Fatal("second Stop reported first")
			}
			if len(order) != 1 || order[0] != "stop" {
				t.Fatalf("stop calls %v; want the first Stop's alone", order)
			}
			if err := o.Serve(context.Background(), func() { t.Error("Serve after Stop ran start") }); !errors.Is(err, ErrNotRunnable) {
				t.Fatalf("Serve after Stop = %v", err)
			}
		})
	}
}

// Release closes what Opened recorded, the last opened first, each once,
// and reports every failure.
func TestOpenedReleasedLastFirst(t *testing.T) {
	o := New()
	var order []string
	closer := func(name string, err error) func() error {
		return func() error { order = append(order, name); return err }
	}
	failed := errors.New("transport close failed")
	o.Opened(closer("store", nil))
	o.Opened(closer("transport", failed))
	o.Opened(closer("swim", nil))
	if err := o.Release(); !errors.Is(err, failed) {
		t.Fatalf("Release = %v, want the transport's failure", err)
	}
	if got := strings.Join(order, " "); got != "swim transport store" {
		t.Fatalf("closed %q, want the last opened first", got)
	}
	if err := o.Release(); err != nil || len(order) != 3 {
		t.Fatalf("second Release = %v after %v; want nothing closed twice", err, order)
	}
}
