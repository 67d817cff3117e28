package manager

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"tempest/wire"
)

// Failing fast without a quorum. A leader cut off from its peers would make
// every submission wait out the quorum timeout before answering that no
// majority stored it; under a partition that is every client's whole wait,
// over and over. After intakeBreakerFailures intakes in a row found no
// majority, the intake breaker opens: a new submission is refused at once
// with no_quorum and a Retry-After, before anything is stored (so the
// refusal is true: it never runs). After the open spell one submission goes
// through as a probe; its intake reaching a majority closes the breaker,
// another miss opens it again. A resubmission of a job this leader already
// holds is never refused this way: it may be stored on some peer, and only
// its own intake can say.

// intakeBreakerFailures is how many intakes in a row must find no majority
// before new submissions are refused at once.
const intakeBreakerFailures = 3

// errQuorumMissed is an intake's outcome that counts against the breaker.
var errQuorumMissed = errors.New("intake found no majority")

// intakeBreaker is the manager's breaker over its intake rounds.
type intakeBreaker struct {
	cb      *gobreaker.TwoStepCircuitBreaker[struct{}]
	openFor time.Duration
	// fastRefusals counts submissions refused because the breaker was open.
	fastRefusals atomic.Uint64
}

func newIntakeBreaker(openFor time.Duration, log *slog.Logger) *intakeBreaker {
	return &intakeBreaker{openFor: openFor, cb: gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        "intake",
		MaxRequests: 1,
		Timeout:     openFor,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= intakeBreakerFailures },
		IsSuccessful: func(err error) bool {
			return err == nil
		},
		// Only an intake that reached peers and found no majority says
		// anything about the quorum; a refusal for the job itself, a
		// resubmission or a lost term does not.
		IsExcluded: func(err error) bool { return err != nil && !errors.Is(err, errQuorumMissed) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			log.Info("intake breaker", "from", from.String(), "to", to.String())
		},
	})}
}

// allow admits a new submission's intake, or refuses it at once. The
// returned done must be called with the intake's outcome (intakeOutcome).
func (b *intakeBreaker) allow(jobID string) (done func(error), err error) {
	done, err = b.cb.Allow()
	if err == nil {
		return done, nil
	}
	b.fastRefusals.Add(1)
	return nil, &wire.Error{Code: wire.CodeNoQuorum, RetryAfter: b.openFor, Message: fmt.Sprintf(
		"no quorum: the last %d submissions found no majority of managers to store them, so job %s was refused at once "+
			"without being stored; it was not run and will not be (retry after %s)", intakeBreakerFailures, jobID, b.openFor)}
}

// state is the breaker's state as a metric reads it: 0 closed, 1 half-open
// (a probe may go through), 2 open.
func (b *intakeBreaker) state() float64 {
	switch b.cb.State() {
	case gobreaker.StateOpen:
		return 2
	case gobreaker.StateHalfOpen:
		return 1
	}
	return 0
}

// intakeOutcome is what an intake's answer tells the breaker: nil when the
// job reached a majority, errQuorumMissed when the intake found none, and
// anything else (not counted) otherwise.
func intakeOutcome(err error) error {
	switch wire.CodeOf(err) {
	case wire.CodeNoQuorum, wire.CodeOutcomeUnknown:
		return fmt.Errorf("%w: %v", errQuorumMissed, err)
	}
	return err
}

// errNotJudged ends an admitted submission that never got to an intake
// (its id was known meanwhile, or its write failed): excluded.
var errNotJudged = errors.New("submission ended before its intake")
