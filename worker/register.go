package worker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"tempest/wire"
)

// Registration rounds that reach no manager are retried with exponential
// backoff between these bounds.
const (
	registerBackoffBase = 200 * time.Millisecond
	registerBackoffMax  = 10 * time.Second
)

// leaderlessRoundMax bounds the wait between rounds that each ended
// accepted by a manager that knew no leader. Those rounds succeed, so the
// failure backoff does not pace them; but while the group has no leader
// every report is refused and asks for another round, and unpaced that
// is a registration storm on the very managers trying to elect one. An
// election takes about a second or two, so waiting longer than this
// would only delay the worker's return to the new leader.
const leaderlessRoundMax = 2 * time.Second

// requestRegistration asks the registrar for a new round, trying avoid (a
// manager that just failed) last. It never blocks: a round already pending
// will do.
func (w *Worker) requestRegistration(avoid string) {
	select {
	case w.kick <- avoid:
	default:
	}
}

// registerLoop registers on start and again whenever the leader is lost,
// until a manager accepts each time.
func (w *Worker) registerLoop(ctx context.Context) {
	avoid := ""
	leaderless := 0 // rounds in a row that learned no leader
	for {
		for attempt := 0; ; attempt++ {
			led, err := w.registerRound(ctx, avoid)
			if err == nil {
				if led {
					leaderless = 0
				} else {
					leaderless++
				}
				break
			}
			if ctx.Err() != nil {
				return
			}
			level := w.log.Debug
			if attempt%10 == 0 {
				level = w.log.Warn // keep reporting, without a line per retry
			}
			level("registration failed; retrying", "attempt", attempt+1, "err", err)
			if sleepCtx(ctx, backoff(attempt, registerBackoffBase, registerBackoffMax)) != nil {
				return
			}
		}
		if leaderless > 0 && sleepCtx(ctx, backoff(leaderless-1, registerBackoffBase, leaderlessRoundMax)) != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case avoid = <-w.kick:
		}
	}
}

// registerRound offers the registration to each manager in turn until one
// accepts, following not-leader redirects, and then to the leader it names
// (so the leader has this worker's active workflows even when another
// manager took the registration). It reports whether the accepting
// manager named a leader.
func (w *Worker) registerRound(ctx context.Context, avoid string) (bool, error) {
	reg := w.registration()
	candidates := registrationOrder(append(slices.Clone(w.cfg.Managers), w.leader.knownAddrs()...), avoid)
	var errs []error
	for i := 0; i < len(candidates); i++ {
		addr := candidates[i]
		ack, err := w.register(ctx, addr, reg)
		if err != nil {
			var we *wire.Error
			if errors.As(err, &we) && we.Code == wire.CodeNotLeader && we.LeaderAddr != "" && !slices.Contains(candidates[i+1:], we.LeaderAddr) {
				candidates = slices.Insert(candidates, i+1, we.LeaderAddr)
			}
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		return w.adoptRegistration(ctx, addr, ack, reg), nil
	}
	return false, fmt.Errorf("no manager accepted the registration: %w", errors.Join(errs...))
}

func (w *Worker) register(ctx context.Context, addr string, reg *wire.WorkerRegistration) (*wire.RegistrationAck, error) {
	cctx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
	defer cancel()
	resp, err := w.tr.Call(cctx, addr, reg)
	if err != nil {
		return nil, fmt.Errorf("register with %s: %w", addr, err)
	}
	ack, ok := resp.(*wire.RegistrationAck)
	if !ok {
		return nil, fmt.Errorf("register with %s: unexpected reply %s", addr, resp.Type())
	}
	if !ack.Accepted {
		return nil, fmt.Errorf("register with %s: refused: %s", addr, ack.Error)
	}
	return ack, nil
}

// adoptRegistration takes the leader from an accepted registration and
// reports whether there was one. If the manager names no reachable leader,
// the worker reports to that manager for now: it will redirect, or it is
// the leader.
func (w *Worker) adoptRegistration(ctx context.Context, addr string, ack *wire.RegistrationAck, reg *wire.WorkerRegistration) bool {
	w.leader.learnAddrs(ack.Managers)
	leaderAddr := ack.LeaderAddr
	if leaderAddr == "" && ack.Leader != "" {
		if _, resolved := w.leader.setByID(ack.Leader, ack.Term); resolved {
			_, leaderAddr = w.leader.current()
		}
	}
	switch {
	case leaderAddr == "":
		w.leader.set("", addr, ack.Term)
	default:
		w.leader.set(ack.Leader, leaderAddr, ack.Term)
		if leaderAddr != addr {
			if _, err := w.register(ctx, leaderAddr, reg); err != nil {
				w.log.Info("registered with a follower; the leader did not take the registration", "manager", addr, "leader", leaderAddr, "err", err)
			}
		}
	}
	id, lAddr := w.leader.current()
	w.log.Info("registered", "manager", addr, "leader", id, "leader_addr", lAddr, "term", ack.Term, "active_workflows", len(reg.ActiveWorkflows))
	return leaderAddr != ""
}

// registration describes this worker, with the latest progress of every
// workflow on it so a new leader can adopt them.
func (w *Worker) registration() *wire.WorkerRegistration {
	w.mu.Lock()
	defer w.mu.Unlock()
	reg := &wire.WorkerRegistration{
		NodeID:     w.cfg.ID,
		Addr:       w.tr.Addr(),
		Datacenter: w.cfg.Datacenter,
		TotalCores: w.cores.Total(),
		Version:    w.version,
		// What the config lets jobs make this worker do: the managers
		// place exec stages and path: sources only where it is allowed.
		Confinement: w.cfg.Exec.Confinement(w.cfg.SourceDirs),
	}
	if w.members != nil {
		reg.SwimAddr = w.members.Addr()
	}
	for _, id := range sortedKeys(w.execs) {
		reg.ActiveWorkflows = append(reg.ActiveWorkflows, w.execs[id].latest)
	}
	return reg
}

// registrationOrder dedupes addrs, keeping their order, and moves avoid to
// the end: the manager that just failed is tried only after the others.
func registrationOrder(addrs []string, avoid string) []string {
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		if a != "" && a != avoid && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	if avoid != "" && slices.Contains(addrs, avoid) {
		out = append(out, avoid)
	}
	return out
}

// backoff is a full-jitter exponential delay: uniform in
// [0, min(max, base·2^attempt)), but at least base/2 so retries never spin.
func backoff(attempt int, base, maxDelay time.Duration) time.Duration {
	d := maxDelay
	if attempt < 30 {
		d = min(maxDelay, base<<attempt)
	}
	return max(base/2, rand.N(d))
}
