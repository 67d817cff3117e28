package leadership

import (
	"errors"
	"fmt"
	"time"
)

// Profile is a named set of election timings, in the manner of memberlist's
// DefaultLANConfig / DefaultLocalConfig: pick one by name instead of tuning
// constants one by one. Ticks are multiples of TickInterval.
//
// Expected failover after a leader crashes: followers stop deferring to the
// old leader ElectionTicks after its last heartbeat, and the first one whose
// randomized timeout in [ElectionTicks, 2*ElectionTicks) expires wins after
// two round trips (pre-vote, vote). So a new leader appears between one and
// two election timeouts after the crash, plus a round trip; a split vote
// costs another timeout. A leader cut off into a minority stops leading
// within two election timeouts (check-quorum).
type Profile struct {
	Name              string
	TickInterval      time.Duration
	ElectionTicks     int
	HeartbeatTicks    int
	MaxLeaderLHM      int
	FlapMaxChanges    int
	FlapWindowTicks   int
	FlapCooldownTicks int
}

// Shared by every profile so that they differ only in speed: more than 5
// leadership changes within 600 ticks starts a cooldown of 100 ticks.
const (
	defaultElectionTicks     = 10
	defaultHeartbeatTicks    = 2
	defaultMaxLeaderLHM      = 4 // Lifeguard scores run 0 (healthy) to 8
	defaultFlapMaxChanges    = 5
	defaultFlapWindowTicks   = 600
	defaultFlapCooldownTicks = 100
)

func baseProfile(name string, tick time.Duration) Profile {
	return Profile{
		Name:              name,
		TickInterval:      tick,
		ElectionTicks:     defaultElectionTicks,
		HeartbeatTicks:    defaultHeartbeatTicks,
		MaxLeaderLHM:      defaultMaxLeaderLHM,
		FlapMaxChanges:    defaultFlapMaxChanges,
		FlapWindowTicks:   defaultFlapWindowTicks,
		FlapCooldownTicks: defaultFlapCooldownTicks,
	}
}

// LANProfile suits members within one datacenter: 100ms ticks, heartbeats
// every 200ms, election timeout 1s. Failover after a leader crash takes 1-2s;
// flapping (over 5 changes in 60s) pauses this node's elections for 10s.
func LANProfile() Profile { return baseProfile("lan", 100*time.Millisecond) }

// LocalProfile suits members on one host or a very fast network: 50ms ticks,
// heartbeats every 100ms, election timeout 500ms, failover in 0.5-1s.
func LocalProfile() Profile { return baseProfile("local", 50*time.Millisecond) }

// TestProfile is for in-process tests: 20ms ticks, heartbeats every 40ms,
// election timeout 200ms, failover in 200-400ms. It leaves room for a loaded
// CI machine running with -race; go lower and heartbeats start to miss.
func TestProfile() Profile { return baseProfile("test", 20*time.Millisecond) }

// ErrUnknownProfile is returned by ProfileByName for a name it does not know.
var ErrUnknownProfile = errors.New("unknown leadership profile")

// ProfileByName returns the profile called "lan", "local" or "test".
func ProfileByName(name string) (Profile, error) {
	switch name {
	case "lan":
		return LANProfile(), nil
	case "local":
		return LocalProfile(), nil
	case "test":
		return TestProfile(), nil
	}
	return Profile{}, fmt.Errorf("%w %q (want lan, local or test)", ErrUnknownProfile, name)
}

// ElectionTimeout is the base election timeout as a duration.
func (p Profile) ElectionTimeout() time.Duration {
	return time.Duration(p.ElectionTicks) * p.TickInterval
}

// HeartbeatInterval is how often a leader sends heartbeats.
func (p Profile) HeartbeatInterval() time.Duration {
	return time.Duration(p.HeartbeatTicks) * p.TickInterval
}
