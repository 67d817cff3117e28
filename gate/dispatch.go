package gate

import (
	"context"
	"errors"
	"fmt"

	"tempest/leadership"
	"tempest/wire"
)

// sendToDC hands job id (or its newer lease) to datacenter dc's manager
// leader: a LeaseTransfer when the datacenter may already have the job,
// falling back to the JobSubmission, which managers treat as a repeat when
// they know the job. A datacenter that refuses the job for good (invalid,
// or a newer lease elsewhere) is FAILED for it at once.
func (g *Gate) sendToDC(lt *leadership.Term, id, dc string) error {
	var j *jobEntry
	var lease wire.DatacenterLease
	var sub wire.JobSubmission
	g.update(func(*txn) {
		jj, ok := g.jobs[id]
		// A job still being stored on a majority of gates goes nowhere
		// yet: it may be withdrawn.
		if !ok || jj.inFlight[dc] || !jj.send[dc] || jj.placing != nil {
			return
		}
		i := jj.leaseIndex(dc)
		if i < 0 {
			return
		}
		j, lease, sub = jj, jj.rec.Leases[i], jj.rec.Submission
		j.inFlight[dc] = true
	})
	if j == nil {
		return nil
	}
	defer g.update(func(*txn) { delete(j.inFlight, dc) })
	sub.Datacenters, sub.DatacenterCount = nil, 0
	sub.FenceToken, sub.Origin, sub.LeaseTTL = lease.FenceToken, g.cfg.ID, g.cfg.LeaseTTL
	transfer := lease.Version > 0 // the lease changed hands at least once

	log := g.log.With("job_id", id, "dc", dc)
	var msg wire.Message = &sub
	if transfer {
		msg = &wire.LeaseTransfer{JobID: id, Datacenter: dc, NewFenceToken: lease.FenceToken, Version: lease.Version, LeaseTTL: g.cfg.LeaseTTL}
	}
	err := g.callDC(lt.Context(), dc, msg)
	var we *wire.Error
	if transfer && errors.As(err, &we) && we.Code == wire.CodeNotFound {
		// The datacenter never got the job (the old leader died first).
		err = g.callDC(lt.Context(), dc, &sub)
	}
	switch {
	case err == nil:
		g.update(func(*txn) {
			if j.rec.Leases[j.leaseIndex(dc)].FenceToken == lease.FenceToken {
				delete(j.send, dc)
			}
		})
		log.Info("datacenter took the job", "fence_token", lease.FenceToken, "transfer", transfer)
		return nil
	case errors.As(err, &we) && (we.Code == wire.CodeRejected || we.Code == wire.CodeStaleFence):
		log.Warn("datacenter refused the job", "err", err)
		g.failDC(id, dc, fmt.Sprintf("%s refused the job: %s", dc, we.Message))
		return err
	default:
		log.Debug("could not reach the datacenter; will retry", "err", err)
		return err
	}
}

// callDC sends msg to dc's manager leader, following NotLeader answers.
func (g *Gate) callDC(ctx context.Context, dc string, msg wire.Message) error {
	targets := g.dcs.targets(dc)
	if len(targets) == 0 {
		return fmt.Errorf("no live manager known in %s", dc)
	}
	var errs []error
	tried := map[string]bool{}
	for len(targets) > 0 && len(tried) < 8 {
		addr := targets[0]
		targets = targets[1:]
		if tried[addr] {
			continue
		}
		tried[addr] = true
		cctx, cancel := context.WithTimeout(ctx, g.cfg.DispatchTimeout)
		reply, err := g.tr.Call(cctx, addr, msg)
		cancel()
		if err == nil {
			switch r := reply.(type) {
			case *wire.JobAck:
				if !r.Accepted {
					return wire.Errorf(wire.CodeRejected, "%s", r.Error)
				}
			case *wire.LeaseAck:
				if !r.Accepted {
					return wire.Errorf(wire.CodeRejected, "%s", r.Error)
				}
			}
			return nil
		}
		var we *wire.Error
		if errors.As(err, &we) {
			switch we.Code {
			case wire.CodeNotLeader:
				if we.LeaderAddr != "" {
					targets = append([]string{we.LeaderAddr}, targets...)
				}
				errs = append(errs, err)
				continue
			case wire.CodeRejected, wire.CodeStaleFence, wire.CodeNotFound:
				return err
			}
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("%s: %w", dc, errors.Join(errs...))
}

// failDC ends job id in datacenter dc with reason, and tells the
// datacenter to stop (best effort: its lease is gone either way).
func (g *Gate) failDC(id, dc, reason string) {
	g.update(func(tx *txn) {
		j, ok := g.jobs[id]
		if !ok {
			return
		}
		pi := j.progressIndex(dc)
		if pi < 0 || j.rec.Datacenters[pi].Status.Terminal() {
			return
		}
		j.mutateLocked(func(rec *wire.GateJobRecord) {
			rec.Datacenters[pi].Status = wire.JobFailed
			rec.Datacenters[pi].Error = reason
		})
		delete(j.send, dc)
		g.refreshLocked(j)
		tx.commit(j)
		g.log.Warn("datacenter failed for the job", "job_id", id, "dc", dc, "reason", reason)
	})
}
