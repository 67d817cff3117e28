package gate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"tempest/transport"
	"tempest/wire"
	"tempest/workflow"
)

// defaultJobTimeout matches the managers' default for a job without one.
const defaultJobTimeout = time.Hour

// jobEntry is a job in memory; guarded by Gate.mu. rec is replaced, never
// modified in place, once handed to the store or a peer: slices inside it
// are shared with those copies.
type jobEntry struct {
	rec wire.GateJobRecord
	// changed is closed (and replaced) on every visible change; watchers
	// wait on it.
	changed chan struct{}
	// send lists datacenters that have not yet taken the job (or the
	// current lease): the leader's tick retries them. inFlight guards
	// against two sends to one datacenter at once.
	send     map[string]bool
	inFlight map[string]bool
	// cancelled: a client cancelled the job (as opposed to a datacenter
	// failing); the job ends CANCELLED. aborted: an abort_on_fail
	// threshold failed on the merged results; the job ends FAILED with it.
	cancelled string
	aborted   string
	// nextAbortCheck throttles the mid-run threshold checks, each of which
	// merges every datacenter's histograms.
	nextAbortCheck time.Time
	// placing is set while a new job's record is being stored on a
	// majority of gates, and closed once that is decided: a submission of
	// the same id meanwhile waits for it rather than answer too early.
	placing chan struct{}
}

func newJobEntry(rec wire.GateJobRecord) *jobEntry {
	return &jobEntry{rec: rec, changed: make(chan struct{}), send: map[string]bool{}, inFlight: map[string]bool{}}
}

func (j *jobEntry) id() string { return j.rec.Submission.JobID }

// wakeLocked tells watchers something changed.
func (j *jobEntry) wakeLocked() {
	close(j.changed)
	j.changed = make(chan struct{})
}

func (j *jobEntry) leaseIndex(dc string) int {
	return slices.IndexFunc(j.rec.Leases, func(l wire.DatacenterLease) bool { return l.Datacenter == dc })
}

func (j *jobEntry) progressIndex(dc string) int {
	return slices.IndexFunc(j.rec.Datacenters, func(p wire.JobProgress) bool { return p.Datacenter == dc })
}

// mutateLocked replaces the record's slices so copies already handed out
// stay as they were, then applies f.
func (j *jobEntry) mutateLocked(f func(rec *wire.GateJobRecord)) {
	j.rec.Leases = slices.Clone(j.rec.Leases)
	j.rec.Datacenters = slices.Clone(j.rec.Datacenters)
	f(&j.rec)
}

func (g *Gate) load() error {
	recs, err := g.store.load()
	if err != nil {
		return err
	}
	now := g.now()
	var old []string
	g.mu.Lock()
	for _, r := range recs {
		g.version = max(g.version, r.Version)
		if g.expired(r, now) {
			old = append(old, r.Submission.JobID)
			continue
		}
		g.jobs[r.Submission.JobID] = newJobEntry(*r)
	}
	g.mu.Unlock()
	if err := g.store.delete(old...); err != nil {
		g.log.Warn("retention: delete expired job records", "jobs", len(old), "err", err)
	}
	return nil
}

// commitLocked bumps j's version and returns the copy to persist and
// replicate.
func (g *Gate) commitLocked(j *jobEntry) *wire.GateJobRecord {
	g.version++
	j.rec.Version = g.version
	j.wakeLocked()
	rec := j.rec
	return &rec
}

// save persists records and replicates them to the other gates (one way:
// the leader's next change or a successor's sync covers a lost message).
func (g *Gate) save(recs ...*wire.GateJobRecord) {
	if len(recs) == 0 {
		return
	}
	if err := g.store.put(recs...); err != nil {
		g.log.Error("persist job records", "err", err)
	}
	out := make([]*wire.GateJobRecord, 0, len(recs))
	for _, r := range recs {
		fit, _, shed, err := fitRecord(r)
		if err != nil {
			g.log.Warn("replicate job record: too large to send", "job_id", r.Submission.JobID, "err", err)
			continue
		}
		if shed != "" {
			g.log.Warn("replicate job record: too large for a message; sent without "+shed, "job_id", r.Submission.JobID)
		}
		out = append(out, fit)
	}
	g.spawn(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, g.cfg.QuorumTimeout)
		defer cancel()
		for _, id := range g.peerIDs {
			for _, r := range out {
				if err := g.tr.Send(ctx, g.peers[id], r); err != nil {
					g.log.Debug("replicate job record", "peer", id, "job_id", r.Submission.JobID, "err", err)
				}
			}
		}
	})
}

// replicateQuorum hands a new job's record to the other gates and waits
// until a majority (this gate included) stored it, so a successor knows
// the job before the client hears of it.
func (g *Gate) replicateQuorum(ctx context.Context, rec *wire.GateJobRecord) error {
	if g.quorumSize <= 1 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.QuorumTimeout)
	var wg sync.WaitGroup
	// Returning at quorum cancels the calls still out, and waits for them.
	defer wg.Wait()
	defer cancel()
	acks := make(chan error, len(g.peerIDs))
	for _, id := range g.peerIDs {
		wg.Go(func() {
			reply, err := g.tr.Call(ctx, g.peers[id], rec)
			if ack, ok := reply.(*wire.JobAck); err == nil && (!ok || !ack.Accepted) {
				err = fmt.Errorf("gate %s refused the record: %s", id, ackError(ack))
			}
			acks <- err
		})
	}
	have, errs := 1, []error(nil)
	for range g.peerIDs {
		err := <-acks
		if err == nil {
			have++
			if have >= g.quorumSize {
				return nil
			}
		} else {
			errs = append(errs, err)
		}
	}
	return wire.Errorf(wire.CodeNoQuorum, "job %s reached %d of %d gates (need %d): %v",
		rec.Submission.JobID, have, len(g.cfg.Peers), g.quorumSize, errors.Join(errs...))
}

func ackError(a *wire.JobAck) string {
	if a == nil {
		return "unexpected answer"
	}
	return a.Error
}

// handleRecord stores a record the gate leader replicated.
func (g *Gate) handleRecord(_ context.Context, from transport.Peer, rec *wire.GateJobRecord) (wire.Message, error) {
	if !g.isPeer(from.NodeID) {
		return nil, wire.Errorf(wire.CodeRejected, "job records are only accepted from configured gates")
	}
	if rec.Submission.JobID == "" {
		return nil, wire.Errorf(wire.CodeRejected, "job record without a job id")
	}
	if lt := g.lead.Load(); lt != nil && lt.isSynced() {
		// A deposed leader still replicating: this gate's own copy, with
		// the leases it took over, is newer.
		return &wire.JobAck{JobID: rec.Submission.JobID, Accepted: false, Error: "this gate leads now"}, nil
	}
	if leader, _ := g.elector.Leader(); leader != "" && leader != from.NodeID {
		// Only the leader this gate follows writes records; a deposed one
		// learns of its successor from the answer and its next election
		// message.
		return &wire.JobAck{JobID: rec.Submission.JobID, Accepted: false, Error: "not the leader: " + leader + " leads"}, nil
	}
	if stored := g.adopt(rec); stored != nil {
		if err := g.store.put(stored); err != nil {
			return nil, wire.Errorf(wire.CodeUnavailable, "persist job %s: %v", rec.Submission.JobID, err)
		}
	}
	return &wire.JobAck{JobID: rec.Submission.JobID, Accepted: true}, nil
}

// adopt merges a record from another gate: the higher version wins, and a
// record past retention is never taken in. It returns the record to
// persist, or nil if it was not newer.
func (g *Gate) adopt(rec *wire.GateJobRecord) *wire.GateJobRecord {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.version = max(g.version, rec.Version)
	if g.expired(rec, now) {
		return nil
	}
	j, ok := g.jobs[rec.Submission.JobID]
	if ok && j.rec.Version >= rec.Version {
		return nil
	}
	if !ok {
		j = newJobEntry(*rec)
		g.jobs[rec.Submission.JobID] = j
	} else {
		j.rec = *rec
	}
	j.wakeLocked()
	out := j.rec
	return &out
}

// submit places a new job (leader only): pick datacenters, grant a lease
// per datacenter, store and replicate the record to a majority of gates,
// then hand the job to each datacenter.
func (g *Gate) submit(ctx context.Context, sub *wire.JobSubmission) (*wire.JobAck, error) {
	lt, err := g.awaitLeader(ctx)
	if err != nil {
		return nil, err
	}
	if len(sub.Workflows) == 0 {
		return nil, wire.Errorf(wire.CodeRejected, "invalid job: no workflows")
	}
	if err := checkPipelineDatacenters(sub); err != nil {
		return nil, err
	}
	s := *sub
	s.Workflows = slices.Clone(sub.Workflows)
	if s.JobID == "" {
		s.JobID = fmt.Sprintf("j-%016x", g.ids.Next())
	}
	if ack, err := g.existing(ctx, s.JobID); ack != nil || err != nil {
		return ack, err
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
	if s.Timeout == 0 {
		s.Timeout = defaultJobTimeout
	}
	if s.SubmittedAt == 0 {
		s.SubmittedAt = now.UnixNano()
	}
	s.Datacenters, s.DatacenterCount = dcs, len(dcs)
	rec := wire.GateJobRecord{Submission: s, Status: wire.JobSubmitted, CreatedAt: now.UnixNano()}
	for _, dc := range dcs {
		rec.Leases = append(rec.Leases, wire.DatacenterLease{
			JobID: s.JobID, Datacenter: dc, LeaseHolder: g.cfg.ID, FenceToken: lt.nextToken(),
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
	g.mu.Lock()
	if old, ok := g.jobs[s.JobID]; ok {
		if !old.rec.Withdrawn {
			// Another submission of this id got here first.
			g.mu.Unlock()
			return g.existing(ctx, s.JobID)
		}
		// Placed afresh: the new record's version outranks the withdrawn
		// one's everywhere.
		old.wakeLocked()
	}
	j := newJobEntry(rec)
	for _, dc := range dcs {
		j.send[dc] = true
	}
	j.placing = make(chan struct{})
	g.jobs[s.JobID] = j
	stored := g.commitLocked(j)
	g.mu.Unlock()

	log := g.log.With("job_id", s.JobID)
	if err := g.store.put(stored); err != nil {
		g.placed(j)
		g.forget(s.JobID)
		return nil, fmt.Errorf("persist job %s: %w", s.JobID, err)
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
	for i, err := range errs {
		var we *wire.Error
		if errors.As(err, &we) && we.Code == wire.CodeRejected {
			rejected = append(rejected, fmt.Sprintf("%s: %s", dcs[i], we.Message))
		}
	}
	if len(rejected) == len(dcs) {
		return nil, wire.Errorf(wire.CodeRejected, "%s", strings.Join(rejected, "; "))
	}
	return &wire.JobAck{JobID: s.JobID, Accepted: true, Datacenters: dcs}, nil
}

func (j *jobEntry) datacentersLocked() []string {
	out := make([]string, 0, len(j.rec.Leases))
	for _, l := range j.rec.Leases {
		out = append(out, l.Datacenter)
	}
	return out
}

func (g *Gate) forget(id string) {
	g.mu.Lock()
	delete(g.jobs, id)
	g.mu.Unlock()
	if err := g.store.delete(id); err != nil {
		g.log.Warn("forget job", "job_id", id, "err", err)
	}
}

// sendToDC hands job id (or its newer lease) to datacenter dc's manager
// leader: a LeaseTransfer when the datacenter may already have the job,
// falling back to the JobSubmission, which managers treat as a repeat when
// they know the job. A datacenter that refuses the job for good (invalid,
// or a newer lease elsewhere) is FAILED for it at once.
func (g *Gate) sendToDC(lt *leaderTerm, id, dc string) error {
	g.mu.Lock()
	j, ok := g.jobs[id]
	// A job still being stored on a majority of gates goes nowhere yet: it
	// may be withdrawn.
	if !ok || j.inFlight[dc] || !j.send[dc] || j.placing != nil {
		g.mu.Unlock()
		return nil
	}
	i := j.leaseIndex(dc)
	if i < 0 {
		g.mu.Unlock()
		return nil
	}
	lease := j.rec.Leases[i]
	sub := j.rec.Submission
	sub.Datacenters, sub.DatacenterCount = nil, 0
	sub.FenceToken, sub.Origin, sub.LeaseTTL = lease.FenceToken, g.cfg.ID, g.cfg.LeaseTTL
	transfer := lease.Version > 0 // the lease changed hands at least once
	j.inFlight[dc] = true
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		delete(j.inFlight, dc)
		g.mu.Unlock()
	}()

	log := g.log.With("job_id", id, "dc", dc)
	var msg wire.Message = &sub
	if transfer {
		msg = &wire.LeaseTransfer{JobID: id, Datacenter: dc, FromGate: "", ToGate: g.cfg.ID, NewFenceToken: lease.FenceToken, Version: lease.Version, LeaseTTL: g.cfg.LeaseTTL}
	}
	err := g.callDC(lt.ctx, dc, msg)
	var we *wire.Error
	if transfer && errors.As(err, &we) && we.Code == wire.CodeNotFound {
		// The datacenter never got the job (the old leader died first).
		err = g.callDC(lt.ctx, dc, &sub)
	}
	switch {
	case err == nil:
		g.mu.Lock()
		if j.rec.Leases[j.leaseIndex(dc)].FenceToken == lease.FenceToken {
			delete(j.send, dc)
		}
		g.mu.Unlock()
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
	_, err := g.callDCReply(ctx, dc, msg)
	return err
}

// callDCReply is callDC returning the leader's answer.
func (g *Gate) callDCReply(ctx context.Context, dc string, msg wire.Message) (wire.Message, error) {
	targets := g.dcs.targets(dc)
	if len(targets) == 0 {
		return nil, fmt.Errorf("no live manager known in %s", dc)
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
					return nil, wire.Errorf(wire.CodeRejected, "%s", r.Error)
				}
			case *wire.LeaseAck:
				if !r.Accepted {
					return nil, wire.Errorf(wire.CodeRejected, "%s", r.Error)
				}
			}
			return reply, nil
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
				return nil, err
			}
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("%s: %w", dc, errors.Join(errs...))
}

// handleJobProgress takes a datacenter's report. A follower passes it to
// the leader; the leader renews the lease and merges the report.
func (g *Gate) handleJobProgress(ctx context.Context, _ transport.Peer, jp *wire.JobProgress) (wire.Message, error) {
	lt := g.lead.Load()
	if lt == nil {
		leader, addr := g.elector.Leader()
		if leader == "" || leader == g.cfg.ID || addr == "" {
			return nil, g.elector.NotLeaderError()
		}
		return g.tr.Call(ctx, addr, jp)
	}
	// No report is answered before the takeover's majority read: until
	// then this gate may not hold the job.
	select {
	case <-lt.synced:
	case <-lt.ctx.Done():
		return nil, g.elector.NotLeaderError()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	g.mu.Lock()
	_, known := g.jobs[jp.JobID]
	g.mu.Unlock()
	if !known {
		if ack, found := g.unknownReport(ctx, lt, jp); !found {
			return ack, nil
		}
	}
	now := g.now()
	var stored *wire.GateJobRecord
	ack := &wire.ProgressAck{Leader: g.cfg.ID}
	g.mu.Lock()
	j, ok := g.jobs[jp.JobID]
	if !ok {
		// Forgotten meanwhile (retention): nobody will read its results.
		g.mu.Unlock()
		ack.Cancel = !jp.Status.Terminal()
		return ack, nil
	}
	li, pi := j.leaseIndex(jp.Datacenter), j.progressIndex(jp.Datacenter)
	if li < 0 || pi < 0 {
		g.mu.Unlock()
		return nil, wire.Errorf(wire.CodeRejected, "job %s does not run in %s", jp.JobID, jp.Datacenter)
	}
	cur := j.rec.Datacenters[pi]
	if cur.Status.Terminal() {
		// The gate already ended the job here (lease expired, cancelled):
		// a datacenter still running it must stop. The token proves to the
		// manager that the lease holder says so.
		ack.Cancel = !jp.Status.Terminal()
		ack.FenceToken = j.rec.Leases[li].FenceToken
		g.mu.Unlock()
		return ack, nil
	}
	if jp.FenceToken >= j.rec.Leases[li].FenceToken {
		delete(j.send, jp.Datacenter)
	}
	statusChanged := jp.Status != cur.Status
	j.mutateLocked(func(rec *wire.GateJobRecord) {
		rec.Leases[li].ExpiresAt = now.Add(g.cfg.LeaseTTL).UnixNano()
		rec.Datacenters[pi] = *jp
	})
	if rec := j.rec.Leases[li]; rec.LeaseHolder == g.cfg.ID {
		ack.LeaseTTL = g.cfg.LeaseTTL
	}
	if g.refreshLocked(j) || statusChanged {
		stored = g.commitLocked(j)
	} else {
		j.wakeLocked()
	}
	var check *wire.GateJobRecord
	if j.aborted == "" && j.cancelled == "" && !now.Before(j.nextAbortCheck) && hasAbortThresholds(j.rec.Submission.Workflows) {
		j.nextAbortCheck = now.Add(abortCheckInterval)
		rec := j.rec
		check = &rec
	}
	g.mu.Unlock()
	if stored != nil {
		g.save(stored)
	}
	if check != nil {
		if reason := g.abortReason(check); reason != "" {
			g.spawn(func(ctx context.Context) { g.abort(ctx, check.Submission.JobID, reason) })
		}
	}
	return ack, nil
}

// abortCheckInterval is the least time between two mid-run checks of a
// job's abort_on_fail thresholds on the merged results.
const abortCheckInterval = time.Second

func hasAbortThresholds(specs []wire.WorkflowSpec) bool {
	for _, s := range specs {
		for _, th := range s.Thresholds {
			if th.AbortOnFail {
				return true
			}
		}
	}
	return false
}

// abortReason judges a running job's abort_on_fail thresholds on the
// results merged across datacenters (and shards); a threshold with no data
// yet is not judged. It returns the failure, or "".
func (g *Gate) abortReason(rec *wire.GateJobRecord) string {
	for i, spec := range rec.Submission.Workflows {
		if spec.Shard > 1 && i > 0 && rec.Submission.Workflows[i-1].Name == spec.Name {
			continue
		}
		var abort []wire.Threshold
		for _, th := range spec.Thresholds {
			if th.AbortOnFail {
				abort = append(abort, th)
			}
		}
		if len(abort) == 0 {
			continue
		}
		var steps []wire.StepStats
		var completed, failed int64
		var elapsed time.Duration
		for _, p := range rec.Datacenters {
			for _, w := range p.Workflows {
				if w.WorkflowName == spec.Name {
					steps = append(steps, w.StepStats...)
					completed, failed, elapsed = completed+w.CompletedCount, failed+w.FailedCount, max(elapsed, w.Elapsed)
				}
			}
		}
		for _, r := range workflow.Evaluate(abort, steps, completed, failed, elapsed) {
			if !r.Passed && r.Actual != workflow.NoData {
				reason := fmt.Sprintf("%s%s (actual %s) in workflow %s", wire.ThresholdAbortPrefix, r.Expr, r.Actual, spec.Name)
				if r.Step != "" {
					reason += ", step " + r.Step
				}
				return reason
			}
		}
	}
	return ""
}

// abort ends a job everywhere because an abort_on_fail threshold failed.
func (g *Gate) abort(ctx context.Context, id, reason string) {
	g.mu.Lock()
	j, ok := g.jobs[id]
	if !ok || j.aborted != "" || j.rec.Status.Terminal() {
		g.mu.Unlock()
		return
	}
	j.aborted = reason
	g.mu.Unlock()
	g.log.Warn("abort_on_fail threshold failed on the merged results; ending the job", "job_id", id, "reason", reason)
	if _, err := g.stopEverywhere(ctx, id, reason); err != nil {
		g.log.Warn("abort", "job_id", id, "err", err)
	}
}

// failDC ends job id in datacenter dc with reason, and tells the
// datacenter to stop (best effort: its lease is gone either way).
func (g *Gate) failDC(id, dc, reason string) {
	g.mu.Lock()
	j, ok := g.jobs[id]
	if !ok {
		g.mu.Unlock()
		return
	}
	pi := j.progressIndex(dc)
	if pi < 0 || j.rec.Datacenters[pi].Status.Terminal() {
		g.mu.Unlock()
		return
	}
	j.mutateLocked(func(rec *wire.GateJobRecord) {
		rec.Datacenters[pi].Status = wire.JobFailed
		rec.Datacenters[pi].Error = reason
	})
	delete(j.send, dc)
	g.refreshLocked(j)
	stored := g.commitLocked(j)
	g.mu.Unlock()
	g.log.Warn("datacenter failed for the job", "job_id", id, "dc", dc, "reason", reason)
	g.save(stored)
}

// refreshLocked re-derives the job's status from its datacenters and
// reports whether it changed.
func (g *Gate) refreshLocked(j *jobEntry) bool {
	old, oldErr := j.rec.Status, j.rec.Error
	if old.Terminal() {
		return false
	}
	st, msg := deriveStatus(j.rec.Datacenters, j.cancelled, j.aborted)
	j.rec.Status, j.rec.Error = st, msg
	if st.Terminal() && j.rec.FinishedAt == 0 {
		j.rec.FinishedAt = g.now().UnixNano()
		g.log.Info("job ended", "job_id", j.id(), "status", st, "error", msg)
	}
	return st != old || msg != oldErr
}

// deriveStatus is the global job state machine: a job is done when every
// datacenter is; COMPLETED only if every datacenter completed, otherwise
// FAILED naming each datacenter that did not (a partial failure is a
// failure the client must see, never a silent retry elsewhere), or
// CANCELLED when a client cancelled it. While running, the most advanced
// datacenter's state shows.
func deriveStatus(dcs []wire.JobProgress, cancelled, aborted string) (wire.JobStatus, string) {
	if len(dcs) == 0 {
		return wire.JobSubmitted, ""
	}
	allDone, allCompleted, allTimeout := true, true, true
	var failed []string
	rank := map[wire.JobStatus]int{wire.JobSubmitted: 0, wire.JobQueued: 1, wire.JobDispatching: 2, wire.JobRunning: 3, wire.JobCompleting: 4}
	best := wire.JobSubmitted
	for _, p := range dcs {
		if !p.Status.Terminal() {
			allDone = false
			if rank[p.Status] > rank[best] {
				best = p.Status
			}
			continue
		}
		if p.Status != wire.JobCompleted {
			allCompleted = false
			reason := p.Error
			if reason == "" {
				reason = string(p.Status)
			}
			failed = append(failed, fmt.Sprintf("%s %s: %s", p.Datacenter, p.Status, reason))
		}
		allTimeout = allTimeout && p.Status == wire.JobTimeout
	}
	switch {
	case !allDone:
		return best, ""
	case aborted != "":
		return wire.JobFailed, aborted
	case cancelled != "":
		return wire.JobCancelled, cancelled
	case allCompleted:
		return wire.JobCompleted, ""
	case allTimeout:
		return wire.JobTimeout, strings.Join(failed, "; ")
	case len(failed) < len(dcs):
		return wire.JobFailed, fmt.Sprintf("partial failure: %d of %d datacenters did not complete: %s", len(failed), len(dcs), strings.Join(failed, "; "))
	default:
		return wire.JobFailed, strings.Join(failed, "; ")
	}
}

// cancelJob stops a job in every datacenter (leader only).
func (g *Gate) cancelJob(ctx context.Context, id, reason string) (*wire.CancelAck, error) {
	if _, err := g.awaitLeader(ctx); err != nil {
		return nil, err
	}
	g.mu.Lock()
	j, ok := g.jobs[id]
	if !ok {
		g.mu.Unlock()
		return nil, wire.Errorf(wire.CodeNotFound, "job %s not found", id)
	}
	if j.rec.Status.Terminal() {
		g.mu.Unlock()
		return &wire.CancelAck{JobID: id, Cancelled: false, Error: "job already " + string(j.rec.Status)}, nil
	}
	j.cancelled = reason
	g.mu.Unlock()
	return g.stopEverywhere(ctx, id, reason)
}

// stopEverywhere tells every datacenter still running job id to stop, under
// its lease's token, and ends the job's part there. A datacenter that cannot
// be told now stops at its next report, which is answered with a cancel.
func (g *Gate) stopEverywhere(ctx context.Context, id, reason string) (*wire.CancelAck, error) {
	g.mu.Lock()
	j, ok := g.jobs[id]
	if !ok {
		g.mu.Unlock()
		return nil, wire.Errorf(wire.CodeNotFound, "job %s not found", id)
	}
	type target struct {
		dc    string
		token uint64
	}
	var targets []target
	for _, l := range j.rec.Leases {
		if pi := j.progressIndex(l.Datacenter); pi >= 0 && !j.rec.Datacenters[pi].Status.Terminal() {
			targets = append(targets, target{l.Datacenter, l.FenceToken})
		}
	}
	g.mu.Unlock()

	ack := &wire.CancelAck{JobID: id, Cancelled: true}
	for _, t := range targets {
		err := g.callDC(ctx, t.dc, &wire.CancelJob{JobID: id, Reason: reason, FenceToken: t.token})
		if err != nil {
			// The datacenter cannot be told now; its lease is over, so its
			// next report is answered with a cancel.
			g.log.Warn("cancel not delivered; the datacenter stops at its next report", "job_id", id, "dc", t.dc, "err", err)
		}
		g.mu.Lock()
		if pi := j.progressIndex(t.dc); pi >= 0 && !j.rec.Datacenters[pi].Status.Terminal() {
			j.mutateLocked(func(rec *wire.GateJobRecord) {
				rec.Datacenters[pi].Status = wire.JobCancelled
				rec.Datacenters[pi].Error = reason
			})
		}
		g.mu.Unlock()
		ack.WorkflowsCancelled++
	}
	g.mu.Lock()
	g.refreshLocked(j)
	stored := g.commitLocked(j)
	g.mu.Unlock()
	g.save(stored)
	return ack, nil
}
