package rainstorm

// Resending. Acks mean "durable up to N", so an ack comes one checkpoint
// of the receiver (a group commit on a majority of managers) after the
// batch arrived: on a loaded machine, a good part of a second, and it
// varies. A fixed timer either waits too long after a real loss or, below
// the ack delay, resends batches the receiver is about to acknowledge —
// which at-least-once processes again (over-counting with no fault), and
// which feed the backlog that made the acks late (a resend storm). So each
// output channel keeps:
//
//   - an adaptive timeout from the ack delay it measures (as TCP does:
//     smoothed delay plus four deviations), never below half the
//     configured ResendTicks, doubled for every timeout without progress,
//     and never above maxTimeout × ResendTicks: an ack held up by a
//     fault (a dead receiver, a leader change) would otherwise teach a
//     delay of many seconds, and the next loss would stall the channel
//     that long. A sample runs from a batch's first
//     send, resent or not: unlike TCP's, these acks are slow by design,
//     and leaving resent batches out (Karn's rule) would never learn a
//     delay longer than the timeout; an ack that answers a resend only
//     makes the estimate longer, which is the safe side;
//   - per batch, when it was last sent: a timeout resends only the batches
//     sent that long ago, oldest first, at most resendBurst at a time;
//   - the downstream task's incarnation, from its acks: a replacement acks
//     every input as soon as it starts, and the sender then resends all it
//     holds for it at once instead of waiting for a timeout.

const (
	maxTimeout  = 4 // × ResendTicks
	resendBurst = 16
)

type sendTimes struct{ first, last int }

type resendTimer struct {
	srtt, rttvar float64 // ticks; srtt 0 until the first sample
	backoff      int
	sent         map[uint64]sendTimes // unacknowledged batches sent, by seq
	downInc      uint64               // the receiver's newest incarnation seen in an ack
}

// timeout is the current resend timeout in ticks, base the configured one.
func (r *resendTimer) timeout(base int) int {
	t := float64(base)
	if r.srtt > 0 {
		t = max(r.srtt+4*r.rttvar, float64(base)/2)
	}
	return min(int(t+0.5)*max(r.backoff, 1), maxTimeout*base)
}

// sentNow records that batch seq left at tick.
func (r *resendTimer) sentNow(seq uint64, tick int) {
	if r.sent == nil {
		r.sent = map[uint64]sendTimes{}
	}
	if st, ok := r.sent[seq]; ok {
		st.last = tick
		r.sent[seq] = st
		return
	}
	r.sent[seq] = sendTimes{first: tick, last: tick}
}

// due reports whether batch seq should go again at tick.
func (r *resendTimer) due(seq uint64, tick, timeout int) bool {
	st, ok := r.sent[seq]
	return !ok || tick-st.last >= timeout
}

// acked takes an ack up to upTo at tick: a delay sample from upTo's first
// send, and progress resets the backoff.
func (r *resendTimer) acked(upTo uint64, tick int) {
	if st, ok := r.sent[upTo]; ok {
		sample := float64(tick - st.first)
		if r.srtt == 0 {
			r.srtt, r.rttvar = max(sample, 1), sample/2
		} else {
			d := sample - r.srtt
			if d < 0 {
				d = -d
			}
			r.rttvar = 0.75*r.rttvar + 0.25*d
			r.srtt = 0.875*r.srtt + 0.125*sample
		}
	}
	for seq := range r.sent {
		if seq <= upTo {
			delete(r.sent, seq)
		}
	}
	r.backoff = 1
}

// timedOut doubles the timeout after a resend without progress.
func (r *resendTimer) timedOut() { r.backoff = min(max(r.backoff, 1)*2, maxTimeout) }

// receiverRestarted reports whether an ack from incarnation inc shows a
// new incarnation of the receiver (not the first one this sender sees),
// and remembers inc.
func (r *resendTimer) receiverRestarted(inc uint64) bool {
	if inc <= r.downInc {
		return false
	}
	restarted := r.downInc != 0
	r.downInc = inc
	if restarted {
		r.backoff = 1
	}
	return restarted
}
