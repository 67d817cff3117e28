package security

import (
	"sync"
	"testing"
	"time"

	"tempest/internal/testutil"
)

func TestMain(m *testing.M) {
	testutil.VerifyNoLeaks(m)
}

// Secrets the tests rotate between. Both pass ValidateSecret.
const (
	secretOld   = "Qm3v9ZpL7xR2cT8wN4kB6yH1sD5fJ0gA"
	secretNew   = "u7E!rW2q#Lz9Xc4Vb8Nm1Ks6Hd3Fg0Tj"
	secretOther = "hT5nY8cR1mQ4wE7zU0pK3vB6xL9sJ2dF"
)

// fakeClock is the injected clock for the guards: tests move time by hand
// instead of sleeping.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}
