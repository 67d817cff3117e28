package gate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"tempest/jobs"
	"tempest/wire"
)

// submit places a new job (leader only): pick datacenters, grant a lease
// per datacenter, store and replicate the record to a majority of gates,
// then hand the job to each datacenter.
func (g *Gate) submit(ctx context.Context, sub *wire.JobSubmission) (*wire.JobAck, error) {
	lt, err := g.awaitLeader(ctx)
	if err != nil {
		return nil, err
	}
	// Refuse at the door what every manager would refuse, in the managers'
	// words; which types exist and what their params mean is theirs to say.
	if err := jobs.Refusal(jobs.Of(sub).ValidateShape()); err != nil {
		return nil, err
	}
	if err := checkPipelineDatacenters(sub); err != nil {
		return nil, err
	}
	s := *sub
	s.Workflows = slices.Clone(sub.Workflows)
	jobs.Of(&s).Canonicalize(g.now(), g.ids.Next)
	if err := jobs.Of(&s).CheckStoredSize(g.cfg.MaxJobBytesOr()); err != nil {
		return nil, err
	}
	if ack, err := g.existing(ctx, s.JobID); ack != nil || err != nil {
		return ack, err
	}
	if err := g.refuseIfCritical(); err != nil {
		return nil, err
	}

	dcs, err := chooseDatacenters(g.dcs.health(g.cfg.HealthTimeout), s.Datacenters, s.DatacenterCount)
	if wire.CodeOf(err) == wire.CodeUnavailable {
		// The table may only be stale (heartbeats come every few SWIM
		// probe intervals): ask the managers before refusing.
		g.seedDatacenters(ctx)
		dcs, err = chooseDatacenters(g.dcs.health(g.cfg.HealthTimeout), s.Datacenters, s.DatacenterCount)
	}
	if err != nil {
		return nil, err
	}
	now := g.now()
	s.Datacenters, s.DatacenterCount = dcs, len(dcs)
	rec := wire.GateJobRecord{Submission: s, Status: wire.JobSubmitted, CreatedAt: now.UnixNano()}
	for _, dc := range dcs {
		tok, err := lt.NextToken()
		if err != nil {
			return nil, wire.Errorf(wire.CodeUnavailable, "job %s: %v; a new gate leader term is needed", s.JobID, err)
		}
		rec.Leases = append(rec.Leases, wire.DatacenterLease{
			JobID: s.JobID, Datacenter: dc, LeaseHolder: g.cfg.ID, FenceToken: tok,
			ExpiresAt: now.Add(g.cfg.LeaseTTL).UnixNano(),
		})
		rec.Datacenters = append(rec.Datacenters, wire.JobProgress{JobID: s.JobID, Datacenter: dc, Status: wire.JobSubmitted})
	}
	// A record that cannot reach the other gates in one message could
	// never be acknowledged: refuse it before anything is stored.
	if b, err := wire.Marshal(&rec); err != nil {
		return nil, fmt.Errorf("encode job %s: %w", s.JobID, err)
	} else if len(b) > maxRecordBytes {
		return nil, wire.Errorf(wire.CodeTooLarge, "job %s: its record is %d bytes, more than the %d one message between gates holds (data files count)",
			s.JobID, len(b), maxRecordBytes)
	}
	var j *jobEntry
	var stored *wire.GateJobRecord
	err = g.update(func(tx *txn) {
		if old, ok := g.jobs[s.JobID]; ok {
			if !old.rec.Withdrawn {
				// Another submission of this id got here first.
				return
			}
			// Placed afresh: the new record's version outranks the
			// withdrawn one's everywhere.
			old.wakeLocked()
		}
		j = newJobEntry(rec)
		for _, dc := range dcs {
			j.send[dc] = true
		}
		j.placing = make(chan struct{})
		g.jobs[s.JobID] = j
		stored = tx.commitForQuorum(j)
	})
	if j == nil {
		return g.existing(ctx, s.JobID)
	}
	log := g.log.With("job_id", s.JobID)
	if err != nil {
		g.placed(j)
		g.forget(s.JobID)
		return nil, fmt.Errorf("job %s: %w", s.JobID, err)
	}
	if err := g.replicateQuorum(ctx, stored); err != nil {
		err = g.withdraw(j, err)
		g.placed(j)
		log.Warn("job not acknowledged: not stored on a majority of gates", "err", err)
		return nil, err
	}
	g.placed(j)
	log.Info("job submitted", "name", s.Name, "datacenters", dcs, "workflows", len(s.Workflows))

	// First attempt now, so the client hears about a datacenter that
	// refuses the job outright; the tick retries the rest.
	errs := make([]error, len(dcs))
	done := make(chan struct{})
	started := g.spawn(func(context.Context) {
		defer close(done)
		var wg sync.WaitGroup
		for i, dc := range dcs {
			wg.Go(func() { errs[i] = g.sendToDC(lt, s.JobID, dc) })
		}
		wg.Wait()
	})
	if !started {
		return nil, &wire.Error{Code: wire.CodeUnavailable, Message: "gate shutting down"}
	}
	select {
	case <-done:
	case <-ctx.Done():
		// The client left; the sends go on and the tick retries the rest.
		return &wire.JobAck{JobID: s.JobID, Accepted: true, Datacenters: dcs}, nil
	}
	var rejected []string
	field := "" // the job-file field every datacenter refused it for, if one
	for i, err := range errs {
		var we *wire.Error
		if errors.As(err, &we) && we.Code == wire.CodeRejected {
			rejected = append(rejected, fmt.Sprintf("%s: %s", dcs[i], we.Message))
			if i == 0 || we.Field == field {
				field = we.Field
			} else {
				field = ""
			}
		}
	}
	if len(rejected) == len(dcs) {
		return nil, &wire.Error{Code: wire.CodeRejected, Message: strings.Join(rejected, "; "), Field: field}
	}
	return &wire.JobAck{JobID: s.JobID, Accepted: true, Datacenters: dcs}, nil
}
