package manager

import (
	"crypto/rand"
	"fmt"
	"io"
	"math/big"
)

// candidate is a worker eligible for one placement.
type candidate struct {
	id       string
	spare    int // free cores not promised to other placements
	degraded bool
}

// weight is a candidate's share of the draw: its spare cores, halved when it
// is DEGRADED so a struggling worker gets half the work a healthy one of the
// same size would. Weights are doubled rather than halved to stay integers.
func (c candidate) weight() int64 {
	if c.spare <= 0 {
		return 0
	}
	w := int64(c.spare) * 2
	if c.degraded {
		w /= 2
	}
	return w
}

// choose draws one candidate with probability proportional to its weight,
// from r (crypto/rand in production: placement must not be predictable to
// someone who can see the cluster, or they could steer load onto one
// worker; tests inject a seeded source). It returns -1 when no candidate has
// any weight.
func choose(r io.Reader, cands []candidate) (int, error) {
	var total int64
	for _, c := range cands {
		total += c.weight()
	}
	if total == 0 {
		return -1, nil
	}
	n, err := rand.Int(r, big.NewInt(total))
	if err != nil {
		return -1, fmt.Errorf("worker selection: %w", err)
	}
	x := n.Int64()
	for i, c := range cands {
		if x < c.weight() {
			return i, nil
		}
		x -= c.weight()
	}
	return -1, fmt.Errorf("worker selection: draw %d outside total %d", n.Int64(), total)
}
