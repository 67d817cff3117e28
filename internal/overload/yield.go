package overload

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"time"
)

// StepDownLHM is the health score a HIGH node reports to its election while
// a less degraded peer exists: past any profile's leader limit, so it
// neither stands nor is voted in.
const StepDownLHM = math.MaxInt32

// Elector is what a Yielder needs of its role's election.
type Elector interface {
	// SetLHM is the health score the election sees for this node.
	SetLHM(lhm int)
	// Handoff hands this node's leadership to the best follower and
	// returns its id.
	Handoff(ctx context.Context) (string, error)
}

// Yielder is a role's side of HIGH, shared by managers and gates: a leader
// graded HIGH hands its leadership to a peer known to be less degraded,
// once per HIGH episode, and while such a peer exists the node reports
// StepDownLHM so it does not stand again. With no healthier peer (every
// member starved, or a group of one) it keeps leading: stepping down would
// only leave the group without a leader.
type Yielder struct {
	Elector Elector
	// Spawn runs the handoff on a goroutine the role owns (it returns
	// false once the role is stopping).
	Spawn func(func(ctx context.Context)) bool
	Log   *slog.Logger
	// Peer names the role's members in logs ("manager", "gate").
	Peer string

	mu    sync.Mutex
	stage handoffStage
}

type handoffStage int

const (
	handoffNone     handoffStage = iota
	handoffUnderWay              // the leader is handing over; the election sees its true score meanwhile
	handoffOver                  // done or failed: the election sees StepDownLHM
)

// HandoffTimeout bounds a HIGH leader's handoff before it steps down anyway.
const HandoffTimeout = 5 * time.Second

// Apply acts on one grading r: healthier says whether a voting peer
// reports a lower level, lhm is the node's true health score, leading
// whether it leads now.
func (y *Yielder) Apply(r Reading, healthier bool, lhm int, leading bool) {
	y.mu.Lock()
	if r.Level < High {
		y.stage = handoffNone
	}
	if r.Level < High || !healthier {
		y.mu.Unlock()
		y.Elector.SetLHM(lhm)
		return
	}
	start := y.stage == handoffNone && leading
	if start {
		y.stage = handoffUnderWay
	}
	stage := y.stage
	y.mu.Unlock()
	if stage == handoffUnderWay {
		// A leader told its score is past the limit steps down at once,
		// and its group is leaderless for an election timeout: the handoff
		// exists to avoid that, so until it is through the election sees
		// the true score.
		y.Elector.SetLHM(lhm)
	} else {
		y.Elector.SetLHM(StepDownLHM)
	}
	if !start {
		return
	}
	if !y.Spawn(func(ctx context.Context) { y.handOff(ctx, r) }) {
		y.mu.Lock()
		y.stage = handoffNone
		y.mu.Unlock()
	}
}

func (y *Yielder) handOff(ctx context.Context, r Reading) {
	hctx, cancel := context.WithTimeout(ctx, HandoffTimeout)
	defer cancel()
	to, err := y.Elector.Handoff(hctx)
	y.mu.Lock()
	y.stage = handoffOver
	y.mu.Unlock()
	y.Elector.SetLHM(StepDownLHM)
	if err != nil {
		y.Log.Warn("overloaded: leadership not handed over; stepping down", "level", r.Level, "reason", r.Reason, "err", err)
		return
	}
	y.Log.Warn("overloaded: handed leadership to a less degraded "+y.Peer, "to", to, "level", r.Level, "reason", r.Reason)
}
