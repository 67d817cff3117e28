package manager

import (
	"time"

	"tempest/internal/overload"
	"tempest/wire"
)

// Degradation by levels (internal/overload): how late this manager's own
// timers fire and Lifeguard's local health score grade it NORMAL,
// ELEVATED, HIGH or CRITICAL, every heartbeat interval.
//
//   - HIGH: a leader hands its leadership to a peer that is less degraded
//     (one whose heartbeat reports a lower level), and while such a peer
//     exists this manager does not stand for election. With no healthier
//     peer it keeps leading: a group where every manager is starved still
//     needs a leader, and stepping down would only leave it without one.
//   - CRITICAL: the leader also refuses new submissions, with a
//     retry-after, before storing anything: a job it accepted now it could
//     not place or watch in time. Work already accepted goes on.
//   - ELEVATED is reported (status, /metrics, logs) and changes nothing:
//     memberlist already stretches its own probe timeouts with the health
//     score (Lifeguard), which is the gossip and probe relief a starved
//     node can take without lying to its peers.

// gradeLoad grades this manager now, logs a change of level and says
// whether a peer is less degraded.
func (m *Manager) gradeLoad(lhm int) (overload.Reading, bool) {
	r := overload.Classify(m.lag.Lag(), lhm, m.cfg.Overload)
	m.loadMu.Lock()
	prev := m.loadRd.Level
	m.loadRd = r
	m.loadMu.Unlock()
	if r.Level != prev {
		log := m.log.Info
		if r.Level > prev && r.Level >= overload.High {
			log = m.log.Warn
		}
		log("load level changed", "from", prev, "to", r.Level, "reason", r.Reason, "lag", r.Lag.Round(time.Millisecond), "lhm", r.LHM)
	}
	healthier := false
	for _, id := range m.group.Load().VoterIDs {
		// A peer SWIM knows alive but whose heartbeat has not arrived
		// (Version 0) has said nothing of its load.
		if hb, alive, ok := m.managers.get(id); ok && alive && hb.Version != 0 && overload.Level(hb.Load) < r.Level {
			healthier = true
			break
		}
	}
	return r, healthier
}

// loadReading is the latest grading.
func (m *Manager) loadReading() overload.Reading {
	m.loadMu.Lock()
	defer m.loadMu.Unlock()
	return m.loadRd
}

// applyLoad acts on a grading (see the top of this file): the health score
// the election sees, and a leader's handoff once per HIGH episode.
func (m *Manager) applyLoad(r overload.Reading, healthier bool, lhm int) {
	m.yield.Apply(r, healthier, lhm, m.leading() != nil)
}

// refuseIfCritical is intake's check: a CRITICAL leader takes no new job.
func (m *Manager) refuseIfCritical() error {
	r := m.loadReading()
	if r.Level < overload.Critical {
		return nil
	}
	return &wire.Error{Code: wire.CodeUnavailable, RetryAfter: 2 * m.cfg.HeartbeatInterval,
		Message: "manager " + m.cfg.ID + " is overloaded (CRITICAL: " + r.Reason + "); the job was not stored: retry"}
}
