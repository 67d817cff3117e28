package checker

import (
	"testing"
	"time"
)

func TestAvailability(t *testing.T) {
	h := New()
	add := func(sec int, took time.Duration, a Answer) {
		h.AddSubmit(Submit{Key: "k", Answer: a, At: at(sec), Took: took})
	}
	add(-5, 0, Acked)                   // before the window: not counted
	add(1, 100*time.Millisecond, Acked) // prompt; ack at 1.1 s
	add(2, 3*time.Second, Acked)        // late ack at 5 s
	add(3, 500*time.Millisecond, Refused)
	add(4, 20*time.Second, Unknown) // never prompt
	add(6, 2*time.Second, Refused)  // exactly the bound: prompt
	add(30, time.Second, Acked)     // ack at 31 s: the 5 s → 31 s stretch is the longest
	a := h.Availability(at(0), at(40), 2*time.Second)
	if a.Submits != 6 || a.Prompt != 4 {
		t.Errorf("submits %d prompt %d, want 6 and 4", a.Submits, a.Prompt)
	}
	if a.LongestGap != 26*time.Second || !a.GapFrom.Equal(at(5)) {
		t.Errorf("longest gap %s from %s, want 26s from %s", a.LongestGap, a.GapFrom, at(5))
	}
	if got := a.PromptShare(); got < 0.66 || got > 0.67 {
		t.Errorf("prompt share %.3f, want 4/6", got)
	}
}

func TestAvailabilityWithoutAcksIsOneGap(t *testing.T) {
	h := New()
	h.AddSubmit(Submit{Key: "k", Answer: Unknown, At: at(1), Took: 20 * time.Second})
	a := h.Availability(at(0), at(60), 2*time.Second)
	if a.LongestGap != time.Minute || a.Prompt != 0 || a.PromptShare() != 0 {
		t.Errorf("got %+v, want the whole minute as one gap and nothing prompt", a)
	}
	if (Availability{}).PromptShare() != 1 {
		t.Error("no submissions: share should be 1")
	}
}
