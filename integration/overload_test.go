package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"tempest/internal/devcluster"
	"tempest/internal/testutil"
)

// A manager leader starved of CPU for real (SIGSTOP bursts shorter than an
// election timeout, so its peers never time it out) grades itself HIGH from
// its own late timers and hands its leadership to a peer whose heartbeat
// reports less: the handover comes from the degraded leader, not from an
// election its peers started. HIGH is set to 400 ms of lag here so bursts
// of 700 ms reach it while the `lan` profile's 1 s election timeout is not.
func TestStarvedManagerLeaderHandsOver(t *testing.T) {
	c := startWith(t, devcluster.Options{Managers: 3, Workers: 1, ElectionProfile: "lan",
		ManagerConfig: map[string]any{"overload": map[string]any{"high_lag": "400ms", "critical_lag": "1h"}}})
	old := c.leader()
	starveUntilHandedOver(t, c, old, "overloaded: handed leadership to a less degraded manager")
	if now := c.leader(); now == old {
		t.Fatalf("%s leads again right after handing over as degraded", old)
	}
}

// The same for the gates: a starved gate leader hands its leadership to a
// gate whose SWIM metadata says it is less degraded.
func TestStarvedGateLeaderHandsOver(t *testing.T) {
	c := startWith(t, devcluster.Options{Gates: 3, Managers: 1, Workers: 1, ElectionProfile: "lan",
		GateConfig: map[string]any{"overload": map[string]any{"high_lag": "400ms", "critical_lag": "1h"}}})
	old := c.gateLeader()
	starveUntilHandedOver(t, c, old, "overloaded: handed leadership to a less degraded gate")
	if now := c.gateLeader(); now == old {
		t.Fatalf("%s leads again right after handing over as degraded", old)
	}
}

// starveUntilHandedOver stops node in bursts (700 ms stopped, 150 ms
// running) until its log says handed, then checks that it logged its move
// to HIGH on scheduler lag first.
func starveUntilHandedOver(t *testing.T, c *cluster, node, handed string) {
	t.Helper()
	n, _ := c.Node(node)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bursts := make(chan struct{})
	go func() {
		defer close(bursts)
		for ctx.Err() == nil {
			if err := c.Signal(node, syscall.SIGSTOP); err != nil {
				return
			}
			time.Sleep(700 * time.Millisecond)
			c.Signal(node, syscall.SIGCONT)
			time.Sleep(150 * time.Millisecond)
		}
	}()
	stop := func() {
		cancel()
		<-bursts
		c.Signal(node, syscall.SIGCONT)
	}
	defer stop()

	defer func() {
		if t.Failed() {
			b, _ := os.ReadFile(n.Log)
			for _, line := range strings.Split(string(b), "\n") {
				if strings.Contains(line, "load level") || strings.Contains(line, "overloaded") || strings.Contains(line, "leader") {
					t.Logf("%s: %s", node, line)
				}
			}
		}
	}()
	testutil.Eventually(t, 50*time.Second, 100*time.Millisecond, func() error {
		b, err := os.ReadFile(n.Log)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), handed) {
			return fmt.Errorf("%s has not handed over yet", node)
		}
		return nil
	})
	stop()
	b, _ := os.ReadFile(n.Log)
	if !strings.Contains(string(b), "to=HIGH") || !strings.Contains(string(b), "scheduler lag") {
		t.Fatalf("%s handed over without logging its move to HIGH on scheduler lag", node)
	}
}
