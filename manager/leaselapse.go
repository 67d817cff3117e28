package manager

import (
	"context"
	"errors"
	"fmt"
	"time"

	"tempest/wire"
)

// A datacenter cut off from every gate must not run a gate's job to the
// end behind its back: the gate fails the datacenter for the job once its
// lease lapses (no report for lease_ttl), reports nothing of the run from
// then on, and its client sees a partial failure. The manager keeps the
// mirror image of that clock: a report the lease holder acknowledged
// renews the lease here, counted from when the report left (so this side
// lapses no later than the gate's); once lease_ttl passed with none, the
// manager stops the job here itself, as a worker cut off from its
// managers stops its workflows (worker/selffence.go).
//
// The clock is this leader's memory: a new manager leader starts each
// job's lease afresh from its first look, so a job may run up to one
// lease_ttl longer after a manager failover, never less.

// stopLapsedLeases ends every running gate job whose lease lapsed here.
func (m *Manager) stopLapsedLeases(ctx context.Context) {
	now := m.clock.Now()
	type lapse struct {
		id  string
		ttl time.Duration
	}
	var lapsed []lapse
	m.mu.Lock()
	for id, j := range m.jobs {
		ttl := j.rec.Submission.LeaseTTL
		if j.rec.Submission.Origin == "" || ttl <= 0 || j.rec.Status.Terminal() {
			continue
		}
		if j.leaseUntil.IsZero() {
			j.leaseUntil = now.Add(ttl)
			continue
		}
		if now.After(j.leaseUntil) {
			lapsed = append(lapsed, lapse{id, ttl})
		}
	}
	m.mu.Unlock()
	for _, l := range lapsed {
		reason := fmt.Sprintf("gate lease lapsed: no report acknowledged by the lease holder for %s (lease_ttl); the gate has failed the job in this datacenter", l.ttl)
		m.log.Warn("gate lease lapsed; stopping the job here", "job_id", l.id, "lease_ttl", l.ttl)
		if _, err := m.cancelJob(ctx, l.id, wire.JobFailed, reason); err != nil && !errors.Is(err, context.Canceled) {
			m.log.Warn("stopping a job whose gate lease lapsed failed", "job_id", l.id, "err", err)
		}
	}
}
