package gate

import (
	"time"

	"tempest/internal/overload"
	"tempest/wire"
)

// A gate grades its own load as a manager does (internal/overload) and, at
// CRITICAL, refuses new jobs before storing anything, with a retry-after:
// a job it accepted now it could not place or follow in time. Jobs it holds
// go on, and a resubmission of one is answered as ever.

// gradeLoad records this gate's grading now and logs a change of level.
func (g *Gate) gradeLoad(lhm int) {
	r := overload.Classify(g.lag.Lag(), lhm, g.cfg.Overload)
	prev := g.loadRd.Swap(&r)
	if prev == nil || r.Level != prev.Level {
		from := overload.Normal
		if prev != nil {
			from = prev.Level
		}
		g.log.Info("load level changed", "from", from, "to", r.Level, "reason", r.Reason, "lag", r.Lag.Round(time.Millisecond), "lhm", r.LHM)
	}
}

// refuseIfCritical is intake's check: a CRITICAL gate takes no new job.
func (g *Gate) refuseIfCritical() error {
	r := g.loadRd.Load()
	if r == nil || r.Level < overload.Critical {
		return nil
	}
	return &wire.Error{Code: wire.CodeUnavailable, RetryAfter: 2 * time.Second,
		Message: "gate " + g.cfg.ID + " is overloaded (CRITICAL: " + r.Reason + "); the job was not stored: retry"}
}
