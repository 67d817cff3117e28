package gate

import (
	"context"
	"time"

	"tempest/internal/lifecycle"
	"tempest/wire"
)

// Retention. Every gate, leader or not, forgets a finished job Retention
// after it finished (retentionLoop), and no gate takes in a record that is
// already past it, however it arrives (state sync, replication, a record
// lookup, its own disk at start): a record finished longer ago than
// Retention exists on a gate for at most one TickInterval more, and a new
// leader never brings an expired job back from a follower whose clock lags.

// expired reports whether rec finished longer than Retention ago.
func (g *Gate) expired(rec *wire.GateJobRecord, now time.Time) bool {
	return rec.Status.Terminal() && rec.FinishedAt != 0 && now.Sub(time.Unix(0, rec.FinishedAt)) > g.cfg.Retention
}

// retentionLoop forgets finished jobs past retention, every TickInterval.
func (g *Gate) retentionLoop(ctx context.Context) {
	lifecycle.Every(ctx, g.cfg.TickInterval, func() { g.expireOld() })
}

// expireOld forgets every finished job past retention, in memory and on
// disk, and returns how many.
func (g *Gate) expireOld() int {
	now := g.now()
	n := 0
	err := g.update(func(tx *txn) {
		for id, j := range g.jobs {
			if g.expired(&j.rec, now) {
				tx.forget(id)
				n++
			}
		}
	})
	if n == 0 {
		return 0
	}
	if err != nil {
		// The disk copies are skipped at the next start anyway.
		g.log.Warn("retention: delete expired job records", "jobs", n, "err", err)
	}
	g.log.Debug("retention: forgot finished jobs", "jobs", n)
	return n
}
