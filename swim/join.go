package swim

import (
	"context"
	"log/slog"
	"time"
)

// KeepJoining calls join (a Node's Join, or a test's stand-in) with seeds
// until one answers or ctx ends, waiting base, then twice as long each time
// up to max, between attempts. cluster names the cluster in logs. It
// reports whether it joined. Every role runs it on its own goroutine at
// start: seeds may come up after the node does.
func KeepJoining(ctx context.Context, join func(context.Context, []string) (int, error), seeds []string,
	base, max time.Duration, cluster string, log *slog.Logger) bool {
	wait := base
	for attempt := 1; ; attempt++ {
		n, err := join(ctx, seeds)
		if err == nil {
			log.Info("joined "+cluster, "contacted", n, "seeds", seeds)
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		// Every failure while the waits grow, then one in ten: a seed that
		// stays down must not flood the log.
		if wait < max || attempt%10 == 0 {
			log.Warn("join "+cluster+" failed; retrying", "seeds", seeds, "attempt", attempt, "err", err, "retry_in", wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		wait = min(wait*2, max)
	}
}
