package leadership

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"
)

func TestFenceTokens(t *testing.T) {
	for _, tc := range []struct {
		term uint64
		seq  uint32
		want uint64
	}{
		{1, 1, 1<<32 | 1},
		{7, 0, 7 << 32},
		{2, math.MaxUint32, 2<<32 | math.MaxUint32},
	} {
		tok := Token(tc.term, tc.seq)
		if tok != tc.want || TokenTerm(tok) != tc.term {
			t.Errorf("Token(%d, %d) = %#x (term %d), want %#x", tc.term, tc.seq, tok, TokenTerm(tok), tc.want)
		}
	}
	// Any token of a later term beats every token of an earlier one.
	if Token(3, 0) <= Token(2, math.MaxUint32) {
		t.Fatal("a later term's first token is not above an earlier term's last")
	}
	lt := NewTerm(t.Context(), 5, nil)
	defer lt.End()
	a, _ := lt.NextToken()
	b, _ := lt.NextToken()
	if b <= a || TokenTerm(a) != 5 {
		t.Fatalf("tokens %#x then %#x", a, b)
	}
}

// TestTermTokenExhaustion: the last sequence number is issued, then every
// later call is an error; no token ever wraps into one smaller than the
// last issued.
func TestTermTokenExhaustion(t *testing.T) {
	for _, tc := range []struct {
		name    string
		startAt uint64 // sequence already used
		wantOK  int    // tokens still issued
	}{
		{"fresh term", 0, 3},
		{"two left", math.MaxUint32 - 2, 2},
		{"one left", math.MaxUint32 - 1, 1},
		{"none left", math.MaxUint32, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lt := NewTerm(t.Context(), 9, nil)
			defer lt.End()
			lt.seq.Store(tc.startAt)
			var last uint64
			for i := range 3 {
				tok, err := lt.NextToken()
				if i < tc.wantOK {
					if err != nil || tok <= last || TokenTerm(tok) != 9 {
						t.Fatalf("token %d: %#x, %v (last %#x)", i, tok, err, last)
					}
					last = tok
					continue
				}
				if !errors.Is(err, ErrTokensExhausted) || tok != 0 {
					t.Fatalf("token %d past the last sequence: %#x, %v; want ErrTokensExhausted", i, tok, err)
				}
			}
		})
	}
}

// elector is the elector's view for the tests: the term it leads in, 0 when
// it does not lead.
type elector struct{ term atomic.Uint64 }

func (e *elector) current() uint64 { return e.term.Load() }

// TestTermsLeadingChecksTheElector: the held term counts only while the
// elector still leads in it, since callbacks lag the election.
func TestTermsLeadingChecksTheElector(t *testing.T) {
	for _, tc := range []struct {
		name    string
		held    uint64 // 0: no term established
		revoke  uint64 // 0: no revoke
		elector uint64
		want    bool
	}{
		{"leading", 4, 0, 4, true},
		{"no term held", 0, 0, 4, false},
		{"elector lost the lead, callback not here yet", 4, 0, 0, false},
		{"elector moved to a newer term", 4, 0, 5, false},
		{"revoked", 4, 4, 4, false},
		{"late revoke of an older term changes nothing", 4, 3, 4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var el elector
			el.term.Store(tc.elector)
			s := NewTerms(t.Context(), nil, el.current)
			var held *Term
			if tc.held != 0 {
				held = s.Establish(tc.held)
				defer held.End()
			}
			if tc.revoke != 0 {
				got := s.Revoke(tc.revoke)
				if (got != nil) != (tc.revoke == tc.held) {
					t.Fatalf("Revoke(%d) with term %d held = %v", tc.revoke, tc.held, got)
				}
			}
			got := s.Leading()
			if (got != nil) != tc.want {
				t.Fatalf("Leading() = %v, want leading %v", got, tc.want)
			}
			if got != nil && got != held {
				t.Fatal("Leading returned a term other than the one held")
			}
			// Before the barrier opens a leader waits (here until the
			// caller's deadline); a node that does not lead is told so.
			short, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
			defer cancel()
			want := ErrTermEnded
			if tc.want {
				want = context.DeadlineExceeded
			}
			if _, err := s.AwaitServing(short); !errors.Is(err, want) {
				t.Fatalf("AwaitServing before the barrier: %v, want %v", err, want)
			}
		})
	}
}

// TestTermEndStopsItsGoroutines: End cancels the term's context and
// returns only after every goroutine of the term returned; nothing starts
// after it.
func TestTermEndStopsItsGoroutines(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spawn func(owned *atomic.Int64) Spawn
	}{
		{"plain goroutines", func(*atomic.Int64) Spawn { return nil }},
		{"through an owner", func(owned *atomic.Int64) Spawn {
			return func(f func(context.Context)) bool {
				owned.Add(1)
				go f(context.Background())
				return true
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var owned atomic.Int64
			s := NewTerms(t.Context(), tc.spawn(&owned), func() uint64 { return 2 })
			lt := s.Establish(2)
			var running, stopped atomic.Int64
			for range 5 {
				if !lt.Go(func(ctx context.Context) {
					running.Add(1)
					<-ctx.Done()
					// Slow to stop: End must still wait.
					time.Sleep(10 * time.Millisecond)
					stopped.Add(1)
				}) {
					t.Fatal("Go refused during the term")
				}
			}
			for running.Load() < 5 {
				time.Sleep(time.Millisecond)
			}
			if s.Revoke(2) != lt {
				t.Fatal("Revoke did not end the held term")
			}
			if n := stopped.Load(); n != 5 {
				t.Fatalf("Revoke returned with %d of 5 goroutines still running", 5-n)
			}
			if lt.Context().Err() == nil || !lt.Ended() {
				t.Fatal("the term's context is live after it ended")
			}
			if lt.Go(func(context.Context) { t.Error("ran after the term ended") }) {
				t.Fatal("Go accepted work after the term ended")
			}
			if tc.name == "through an owner" && owned.Load() != 5 {
				t.Fatalf("the owner ran %d goroutines, want 5", owned.Load())
			}
		})
	}
}

// TestTermGoRefusedByTheOwner: an owner that is shutting down runs
// nothing, and End does not wait for what never started.
func TestTermGoRefusedByTheOwner(t *testing.T) {
	lt := NewTerm(t.Context(), 1, func(func(context.Context)) bool { return false })
	if lt.Go(func(context.Context) { t.Error("ran though the owner refused") }) {
		t.Fatal("Go reported a start the owner refused")
	}
	done := make(chan struct{})
	go func() { lt.End(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("End waits for a goroutine that never started")
	}
}

// TestTermEstablishEndsTheHeldTerm: a new term never runs beside an old one
// whose revoke was missed.
func TestTermEstablishEndsTheHeldTerm(t *testing.T) {
	var el elector
	s := NewTerms(t.Context(), nil, el.current)
	old := s.Establish(1)
	var stopped atomic.Bool
	old.Go(func(ctx context.Context) { <-ctx.Done(); stopped.Store(true) })
	el.term.Store(2)
	cur := s.Establish(2)
	defer cur.End()
	if !stopped.Load() || !old.Ended() {
		t.Fatal("the old term's work still runs after a new term began")
	}
	if s.Leading() != cur || s.Revoke(1) != nil {
		t.Fatal("the new term is not the one held")
	}
}

// TestTermBarrier: leader-only work waits for the barrier, and learns that
// the term ended instead of waiting forever.
func TestTermBarrier(t *testing.T) {
	for _, tc := range []struct {
		name    string
		act     func(lt *Term) // while a caller waits
		wantErr error
	}{
		{"opens", func(lt *Term) { lt.MarkSynced() }, nil},
		{"opened twice", func(lt *Term) { lt.MarkSynced(); lt.MarkSynced() }, nil},
		{"term ends first", func(lt *Term) { lt.End() }, ErrTermEnded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var el elector
			el.term.Store(3)
			s := NewTerms(t.Context(), nil, el.current)
			lt := s.Establish(3)
			defer lt.End()
			if lt.Synced() {
				t.Fatal("synced before MarkSynced")
			}
			short, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
			defer cancel()
			if err := lt.AwaitSynced(short); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("AwaitSynced before the barrier opened: %v, want the caller's deadline", err)
			}
			errc := make(chan error, 1)
			go func() {
				_, err := s.AwaitServing(t.Context())
				errc <- err
			}()
			tc.act(lt)
			if err := <-errc; !errors.Is(err, tc.wantErr) {
				t.Fatalf("AwaitServing = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr == nil && !lt.Synced() {
				t.Fatal("Synced false after the barrier opened")
			}
		})
	}
}
