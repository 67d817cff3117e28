package checker

import (
	"fmt"
	"slices"
	"time"
)

// Availability is how a run's submissions were answered: how many got a
// definite answer (acknowledged or refused) promptly, and the longest
// stretch of the run in which no submission was acknowledged.
type Availability struct {
	Submits int
	// Prompt counts submissions acknowledged or refused within the
	// promptness bound Availability was given; an unknown never is.
	Prompt int
	// LongestGap is the longest time, within the window, between one
	// acknowledgement (or the window's start) and the next (or its end).
	LongestGap time.Duration
	// GapFrom is where that stretch began.
	GapFrom time.Time
}

// PromptShare is Prompt as a share of Submits (1 with none).
func (a Availability) PromptShare() float64 {
	if a.Submits == 0 {
		return 1
	}
	return float64(a.Prompt) / float64(a.Submits)
}

func (a Availability) String() string {
	return fmt.Sprintf("%d of %d submissions answered (acked or refused) promptly (%.0f%%); longest stretch without an ack %s",
		a.Prompt, a.Submits, 100*a.PromptShare(), a.LongestGap.Round(10*time.Millisecond))
}

// Availability measures the submissions made in [from, to]: which of them
// were acknowledged or refused within prompt, and the longest stretch of
// the window with no acknowledgement arriving. An acknowledgement counts
// when it arrived (At+Took), so a submission held for 20 s before its ack
// leaves those 20 s as a gap.
func (h *History) Availability(from, to time.Time, prompt time.Duration) Availability {
	var a Availability
	acks := []time.Time{from}
	for _, s := range h.Submits() {
		if s.At.Before(from) || s.At.After(to) {
			continue
		}
		a.Submits++
		if s.Answer != Unknown && s.Took <= prompt {
			a.Prompt++
		}
		if s.Answer == Acked {
			ack := s.At.Add(s.Took)
			if ack.After(to) {
				ack = to
			}
			acks = append(acks, ack)
		}
	}
	acks = append(acks, to)
	slices.SortFunc(acks, func(x, y time.Time) int { return x.Compare(y) })
	for i := 1; i < len(acks); i++ {
		if gap := acks[i].Sub(acks[i-1]); gap > a.LongestGap {
			a.LongestGap, a.GapFrom = gap, acks[i-1]
		}
	}
	return a
}
