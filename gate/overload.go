package gate

import (
	"strconv"
	"sync"
	"time"

	"tempest/internal/overload"
	"tempest/swim"
	"tempest/wire"
)

// A gate grades its own load as a manager does (internal/overload):
//
//   - HIGH: a leading gate hands its leadership to a gate that is less
//     degraded, and while one exists it does not stand for election
//     (overload.Yielder, as managers do). Gates tell each other their level
//     in their SWIM metadata ("load"), republished when it changes: a
//     level changes seldom, and gates exchange no heartbeats of their own.
//   - CRITICAL: it also refuses new jobs before storing anything, with a
//     retry-after: a job it accepted now it could not place or follow in
//     time. Jobs it holds go on, and a resubmission of one is answered as
//     ever.

// loadTag is the SWIM metadata tag holding a gate's load level (0 NORMAL
// to 3 CRITICAL). A gate without it (an older one) has said nothing of its
// load and is never taken for a healthier peer.
const loadTag = "load"

// gateLoads is the load level each other gate last published.
type gateLoads struct {
	self  string // this gate: SWIM tells it of itself too
	mu    sync.Mutex
	peers map[string]peerLoad
}

type peerLoad struct {
	level overload.Level
	alive bool
}

// member records what SWIM says of a gate: alive or not, and its level.
func (l *gateLoads) member(n swim.NodeInfo, alive bool) {
	if n.Meta.Role != wire.RoleGate || n.Name == l.self {
		return
	}
	lvl, err := strconv.Atoi(n.Meta.Tags[loadTag])
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		delete(l.peers, n.Name)
		return
	}
	l.peers[n.Name] = peerLoad{level: overload.Level(lvl), alive: alive}
}

// below reports whether one of ids is alive and published a level below
// lvl.
func (l *gateLoads) below(ids []string, lvl overload.Level) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		if p, ok := l.peers[id]; ok && p.alive && p.level < lvl {
			return true
		}
	}
	return false
}

// gradeLoad grades this gate now, logs and publishes a change of level,
// and says whether a voting gate is less degraded.
func (g *Gate) gradeLoad(lhm int) (overload.Reading, bool) {
	r := overload.Classify(g.lag.Lag(), lhm, g.cfg.Overload)
	prev := g.loadRd.Swap(&r)
	if prev == nil || r.Level != prev.Level {
		from := overload.Normal
		if prev != nil {
			from = prev.Level
		}
		log := g.log.Info
		if r.Level > from && r.Level >= overload.High {
			log = g.log.Warn
		}
		log("load level changed", "from", from, "to", r.Level, "reason", r.Reason, "lag", r.Lag.Round(time.Millisecond), "lhm", r.LHM)
		if g.members != nil {
			if err := g.members.UpdateMeta(g.nodeMeta()); err != nil {
				g.log.Debug("publish load level", "err", err)
			}
		}
	}
	return r, g.loads.below(g.group.Load().VoterIDs, r.Level)
}

// loadReading is the latest grading's level (NORMAL before the first).
func (g *Gate) loadReading() overload.Reading {
	if r := g.loadRd.Load(); r != nil {
		return *r
	}
	return overload.Reading{}
}

// refuseIfCritical is intake's check: a CRITICAL gate takes no new job.
func (g *Gate) refuseIfCritical() error {
	r := g.loadReading()
	if r.Level < overload.Critical {
		return nil
	}
	return &wire.Error{Code: wire.CodeUnavailable, RetryAfter: 2 * time.Second,
		Message: "gate " + g.cfg.ID + " is overloaded (CRITICAL: " + r.Reason + "); the job was not stored: retry"}
}
