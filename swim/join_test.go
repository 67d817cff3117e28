package swim

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"
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
