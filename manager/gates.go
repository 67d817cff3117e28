package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"tempest/internal/lifecycle"
	"tempest/security"
	"tempest/swim"
	"tempest/transport"
	"tempest/wire"
)

// Gates (docs/gate.md) drive jobs across datacenters. A manager meets them in a
// second SWIM cluster (Config.GateSwimBind) where its ManagerHeartbeat
// rides in acks, takes jobs from them like from any client, and keeps the
// newest fence token each job's gate has used: a command carrying an older
// one comes from a deposed gate leader and is refused (CodeStaleFence). The
// leader reports every gate-driven job's progress to its gate; those
// reports are what keeps the datacenter's lease alive.

// gateFinalWindow bounds how long after a job ended a new leader still
// reports it to its gate: long enough for a gate that missed the final
// report during a failover, short enough that a restart does not replay a
// week of history.
const gateFinalWindow = time.Minute

// gateTable is the gates SWIM says are alive: id -> QUIC address, and when
// a report to each last failed. A gate that just failed a report goes last
// until gateFailedFor passes: after a gate leader dies, SWIM takes a while
// to say so, and every report round would otherwise wait on it first.
type gateTable struct {
	mu     sync.Mutex
	g      map[string]string
	failed map[string]time.Time
	now    func() time.Time
}

// gateFailedFor is how long a gate that failed a report is tried last.
const gateFailedFor = 10 * time.Second

func (t *gateTable) fail(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failed[id] = t.now()
}

func (t *gateTable) set(id, addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.g[id] = addr
}

func (t *gateTable) remove(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.g, id)
}

// targets lists where to report a job: the hinted gate (the leader, as the
// last answer named it), the lease holder, then every other gate, which
// forwards to its leader.
func (t *gateTable) targets(first ...string) []transport.Peer {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out, failed []transport.Peer
	seen := map[string]bool{}
	add := func(id string) {
		addr, ok := t.g[id]
		if !ok || seen[id] {
			return
		}
		seen[id] = true
		p := transport.Peer{NodeID: id, Addr: addr}
		if at, bad := t.failed[id]; bad && t.now().Sub(at) < gateFailedFor {
			failed = append(failed, p)
			return
		}
		out = append(out, p)
	}
	for _, id := range first {
		add(id)
	}
	for _, id := range slices.Sorted(maps.Keys(t.g)) {
		add(id)
	}
	return append(out, failed...)
}

// gateEmbedder puts the manager's heartbeat in the gate cluster's acks.
// Gates send no payload, and nothing a manager needs comes from the other
// datacenters' managers.
type gateEmbedder struct{ m *Manager }

func (e gateEmbedder) LocalState() []byte { return e.m.LocalState() }

func (gateEmbedder) PeerState(swim.NodeInfo, []byte, time.Duration) {}

// startGateSwim joins the gates' cluster when configured.
func (m *Manager) startGateSwim(keyring *security.Keyring, logger *slog.Logger) error {
	if m.cfg.GateSwimBind == "" {
		return nil
	}
	scfg, err := gateSwimConfig(m.cfg, m.nodeMeta(), keyring, logger)
	if err != nil {
		return err
	}
	scfg.Embedder = gateEmbedder{m}
	scfg.Events = swim.EventHandler{
		OnJoin:   m.onGateAlive,
		OnUpdate: m.onGateAlive,
		OnDead:   func(n swim.NodeInfo) { m.gates.remove(n.Name) },
	}
	if m.gateMembers, err = swim.New(scfg); err != nil {
		return fmt.Errorf("manager gate swim: %w", err)
	}
	m.life.Opened(m.gateMembers.Shutdown)
	return nil
}

// gateSwimConfig is this manager's membership of the gates' cluster. Its
// timing is the gates' (GateSwimProfile), not the datacenter's: that
// cluster spans datacenters, where the datacenter's fast profile would take
// a slow link for a dead gate.
func gateSwimConfig(cfg Config, meta swim.NodeMeta, keyring *security.Keyring, logger *slog.Logger) (swim.Config, error) {
	scfg, err := cfg.SwimConfig(cfg.GateSwimBind, keyring, logger)
	if err != nil {
		return swim.Config{}, fmt.Errorf("manager GateSwimBind: %w", err)
	}
	scfg.Profile = cfg.GateSwimProfile
	scfg.Meta = meta
	return scfg, nil
}

func (m *Manager) onGateAlive(n swim.NodeInfo) {
	if n.Meta.Role == wire.RoleGate && n.Meta.QUICAddr != "" {
		m.gates.set(n.Name, n.Meta.QUICAddr)
	}
}

func (m *Manager) gateJoinLoop(ctx context.Context) {
	m.gateMembers.KeepJoined(ctx, m.cfg.GateJoin, m.cfg.HeartbeatInterval, 30*m.cfg.HeartbeatInterval, "the gates' swim cluster", m.log)
}

// staleFenceLocked reports whether token is older than the newest this
// manager has seen for job j. Zero is a client's command, not a gate's, and
// is never stale.
func staleFenceLocked(j *jobState, token uint64) *wire.Error {
	if token == 0 || token >= j.rec.Submission.FenceToken {
		return nil
	}
	return wire.Errorf(wire.CodeStaleFence, "job %s: fence token %d is older than %d (held by gate %s)",
		j.rec.ID(), token, j.rec.Submission.FenceToken, j.rec.Submission.Origin)
}

// adoptLeaseLocked moves j to a newer gate lease. It reports whether
// anything changed.
func adoptLeaseLocked(j *jobState, token uint64, holder string) bool {
	if token <= j.rec.Submission.FenceToken {
		return false
	}
	j.rec.Submission.FenceToken = token
	if holder != "" {
		j.rec.Submission.Origin = holder
	}
	j.gateHint = ""
	j.gateFinalAcked = false
	return true
}

// checkFence refuses a command for job id carrying an older fence token.
func (m *Manager) checkFence(id string, token uint64) error {
	if token == 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if j, ok := m.jobs[id]; ok {
		if err := staleFenceLocked(j, token); err != nil {
			return err
		}
	}
	return nil
}

// handleLeaseTransfer moves a job to a new gate leader's lease: the
// transfer's authenticated sender.
func (m *Manager) handleLeaseTransfer(ctx context.Context, from transport.Peer, lt *wire.LeaseTransfer) (wire.Message, error) {
	if _, err := m.awaitLeader(ctx, m.elector.NotLeaderError); err != nil {
		return nil, err
	}
	holder := from.NodeID
	var stale *wire.Error
	found := false
	err := m.update(func(tx *txn) {
		j, ok := m.jobs[lt.JobID]
		if !ok {
			return
		}
		found = true
		if stale = staleFenceLocked(j, lt.NewFenceToken); stale != nil {
			return
		}
		if lt.LeaseTTL > 0 {
			j.rec.Submission.LeaseTTL = lt.LeaseTTL
			j.leaseUntil = m.clock.Now().Add(lt.LeaseTTL)
		}
		if adoptLeaseLocked(j, lt.NewFenceToken, holder) {
			tx.touchJob(j, true)
		}
	})
	switch {
	case !found:
		return nil, wire.Errorf(wire.CodeNotFound, "job %s not found in %s", lt.JobID, m.cfg.Datacenter)
	case stale != nil:
		return nil, stale
	case err != nil:
		return nil, wire.Errorf(wire.CodeUnavailable, "persist lease of job %s: %v", lt.JobID, err)
	}
	m.log.Info("lease transferred", "job_id", lt.JobID, "gate", holder, "fence_token", lt.NewFenceToken)
	m.kickGates() // the new lease holder wants the job's state now
	return &wire.LeaseAck{JobID: lt.JobID, Datacenter: m.cfg.Datacenter, Accepted: true}, nil
}

// kickGates asks for a report round now.
func (m *Manager) kickGates() {
	select {
	case m.gateKick <- struct{}{}:
	default:
	}
}

// gateReport is one job's report and where to send it.
type gateReport struct {
	jp      wire.JobProgress
	targets []transport.Peer
}

// gateReportLoop reports every gate-driven job's progress to its gate while
// this manager leads: each running job every GateReportInterval (the
// reports renew the lease), and an ended job until its gate acknowledged
// the final report.
func (m *Manager) gateReportLoop(ctx context.Context) {
	t := time.NewTicker(m.cfg.GateReportInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.gateKick:
		}
		lt := m.leading()
		if lt == nil || !lt.Synced() {
			continue
		}
		reports := m.gateReports()
		var wg sync.WaitGroup
		for _, r := range reports {
			wg.Go(func() { m.sendGateReport(lt.Context(), r) })
		}
		wg.Wait()
		m.stopLapsedLeases(lt.Context())
		// Kicks come with every status change; a round reports every
		// gate-driven job, so rounds are spaced even when kicks are not.
		if !lifecycle.Sleep(ctx, m.cfg.GateReportInterval/10) {
			return
		}
	}
}

func (m *Manager) gateReports() []gateReport {
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []gateReport
	for _, j := range m.jobs {
		if j.rec.Submission.Origin == "" || j.gateFinalAcked {
			continue
		}
		if j.rec.Status.Terminal() && now.Sub(j.rec.Finished()) > gateFinalWindow {
			continue
		}
		jp := m.jobProgressLocked(j, false)
		// The gate sees the end settle as clients here do (settle.go):
		// its final report is the settled one.
		jp.Status = shownStatusLocked(j)
		jp.Workflows = make([]wire.WorkflowProgress, 0, len(j.wfs))
		for _, w := range j.wfs {
			p := workflowProgressOf(&w.rec)
			// The gate shows the datacenter's count of attempts, so a
			// retried workflow reads the same through a gate as here.
			p.Attempts = w.rec.Attempts
			if w.rec.Status.Terminal() {
				p.Series = w.rec.Series
			}
			if w.rec.Status == wire.WorkflowPending {
				p.Waiting = w.waiting
			}
			jp.Workflows = append(jp.Workflows, p)
		}
		fitJobSeries(&jp)
		out = append(out, gateReport{jp: jp, targets: m.gates.targets(j.gateHint, j.rec.Submission.Origin)})
	}
	return out
}

// sendGateReport delivers one report to the first gate that takes it.
func (m *Manager) sendGateReport(ctx context.Context, r gateReport) {
	log := m.log.With("job_id", r.jp.JobID)
	if len(r.targets) == 0 {
		log.Debug("no gate known to report to", "gate", r.jp.LeaseHolder)
		return
	}
	for _, p := range r.targets {
		// One report interval per gate: a dead gate costs a round no more
		// than that, and the next round tries it last.
		sentAt := m.clock.Now()
		cctx, cancel := context.WithTimeout(ctx, m.cfg.GateReportInterval)
		reply, err := m.tr.Call(cctx, p.Addr, &r.jp)
		if wire.CodeOf(err) == wire.CodeTooLarge {
			// Too much detail for one message: the gate still needs the
			// statuses and counts (they renew the lease and end the job),
			// so they go without series, then without histograms.
			log.Error("report to the gate over the message cap; sending it with less detail", "gate", p.NodeID, "err", err)
			reply, err = m.tr.Call(cctx, p.Addr, slimReport(r.jp, false))
			if wire.CodeOf(err) == wire.CodeTooLarge {
				reply, err = m.tr.Call(cctx, p.Addr, slimReport(r.jp, true))
			}
		}
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			m.gates.fail(p.NodeID)
			log.Debug("progress report to gate failed", "gate", p.NodeID, "err", err)
			continue
		}
		ack, ok := reply.(*wire.ProgressAck)
		if !ok {
			log.Warn("unexpected reply to a gate report", "gate", p.NodeID, "type", reply.Type())
			return
		}
		m.gateAcked(ctx, r.jp, ack, sentAt)
		return
	}
}

// gateAcked records a gate's answer to a report: who leads the gates now,
// that the final report arrived, or that the gate has ended the job here
// (its lease expired or the job was cancelled), in which case it stops.
//
// A Cancel is obeyed only from the job's lease holder, under a token not
// older than the newest this manager knows for the job: a deposed gate
// leader, or a gate that merely has not heard of the job yet, must not
// kill an acknowledged job.
func (m *Manager) gateAcked(ctx context.Context, jp wire.JobProgress, ack *wire.ProgressAck, sentAt time.Time) {
	m.mu.Lock()
	j, ok := m.jobs[jp.JobID]
	var holder string
	var token uint64
	if ok {
		if ack.Leader != "" {
			j.gateHint = ack.Leader
		}
		if ack.LeaseTTL > 0 && ack.Leader == j.rec.Submission.Origin {
			// Renewed at the gate when the report arrived, which is after
			// it left: counting from sentAt lapses here first.
			if until := sentAt.Add(ack.LeaseTTL); until.After(j.leaseUntil) {
				j.leaseUntil = until
			}
		}
		if jp.Status.Terminal() {
			j.gateFinalAcked = true
		}
		holder, token = j.rec.Submission.Origin, j.rec.Submission.FenceToken
	}
	terminal := ok && j.rec.Status.Terminal()
	m.mu.Unlock()
	if !ack.Cancel || !ok || terminal {
		return
	}
	if ack.Leader != holder || ack.FenceToken == 0 || ack.FenceToken < token {
		m.log.Warn("ignoring a cancel from a gate that does not hold the job's lease", "job_id", jp.JobID,
			"gate", ack.Leader, "lease_holder", holder, "fence_token", ack.FenceToken, "newest", token)
		return
	}
	m.log.Warn("the gate ended this job here; cancelling it", "job_id", jp.JobID)
	if _, err := m.cancelJob(ctx, jp.JobID, wire.JobCancelled, "cancelled by the gate: this datacenter's lease ended"); err != nil && !errors.Is(err, context.Canceled) {
		m.log.Warn("cancel asked by the gate failed", "job_id", jp.JobID, "err", err)
	}
}

// slimReport is jp without per-second series and, with noSteps, without
// step statistics: what a report keeps when the whole does not fit.
func slimReport(jp wire.JobProgress, noSteps bool) *wire.JobProgress {
	jp.Workflows = slices.Clone(jp.Workflows)
	for i := range jp.Workflows {
		jp.Workflows[i].Series = nil
		if noSteps {
			jp.Workflows[i].StepStats = nil
		}
	}
	return &jp
}
