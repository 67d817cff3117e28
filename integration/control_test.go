package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"tempest/api"
	"tempest/internal/testutil"
	"tempest/wire"
)

// One follower down: provisioning continues. Two down: submissions fail fast
// with a clear "no quorum" error, and succeed again when one returns.
func TestQuorumLossFailsFastAndRecovers(t *testing.T) {
	c := startCluster(t, 3, 1, 2)
	leader := c.leader()
	var followers []string
	for _, n := range c.Nodes() {
		if n.Role == "manager" && n.Name != leader {
			followers = append(followers, n.Name)
		}
	}
	nap := "name: nap\ntimeout: 30s\nworkflows:\n  - {name: nap, type: sleep, cores: 1, duration: 100ms}\n"

	if err := c.Kill(followers[0]); err != nil {
		t.Fatal(err)
	}
	id := c.submit(nap)
	if st := c.waitStatus(id, 30*time.Second, terminal); st.Status != wire.JobCompleted {
		t.Fatalf("with one follower down the job ended %s", st.Status)
	}

	if err := c.Kill(followers[1]); err != nil {
		t.Fatal(err)
	}
	// The leader may step down (check-quorum) or stay and refuse; either
	// way the answer must come fast and say why.
	testutil.Eventually(t, 20*time.Second, 200*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		_, err := c.client.Submit(ctx, []byte(nap), "nap.yaml")
		if err == nil {
			return errors.New("submission accepted with 1 of 3 managers alive")
		}
		if d := time.Since(start); d > 8*time.Second {
			return fmt.Errorf("refusal took %s", d)
		}
		msg := strings.ToLower(err.Error())
		if !strings.Contains(msg, "quorum") && !strings.Contains(msg, "no_leader") && !strings.Contains(msg, "no leader") {
			return fmt.Errorf("refusal does not explain itself: %v", err)
		}
		return nil
	})

	if err := c.Restart(followers[1]); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 40*time.Second, 300*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		id, err := c.client.Submit(ctx, []byte(nap), "nap.yaml")
		if err != nil {
			return err
		}
		st, err := c.client.Job(ctx, id)
		if err != nil {
			return err
		}
		if st.Status == wire.JobFailed {
			return fmt.Errorf("job %s failed: %s", id, st.Error)
		}
		return nil
	})
}

// Cancel frees every core (visible in the cluster view); timeout ends in
// TIMEOUT.
func TestCancelFreesCoresAndTimeout(t *testing.T) {
	c := startCluster(t, 1, 2, 2)
	id := c.submit(`name: cancel-me
timeout: 60s
workflows:
  - {name: a, type: sleep, cores: 2, duration: 30s}
  - {name: b, type: sleep, cores: 1, duration: 30s}
`)
	c.waitRunning(id)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.client.Cancel(ctx, id, "test"); err != nil {
		t.Fatal(err)
	}
	if st := c.waitStatus(id, 20*time.Second, terminal); st.Status != wire.JobCancelled {
		t.Fatalf("cancelled job ended %s", st.Status)
	}
	c.waitFreeCores(4, 20*time.Second)

	id = c.submit(`name: too-slow
timeout: 2s
workflows:
  - {name: a, type: sleep, cores: 1, duration: 30s}
`)
	if st := c.waitStatus(id, 30*time.Second, terminal); st.Status != wire.JobTimeout {
		t.Fatalf("job past its timeout ended %s", st.Status)
	}
	c.waitFreeCores(4, 20*time.Second)
}

func (c *cluster) waitFreeCores(want int, within time.Duration) {
	c.t.Helper()
	testutil.Eventually(c.t, within, 200*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		view, err := c.client.Cluster(ctx)
		if err != nil {
			return err
		}
		free := 0
		for _, n := range view.Nodes {
			if n.Role == "worker" {
				free += n.AvailableCores
			}
		}
		if free != want {
			return fmt.Errorf("%d cores free, want %d", free, want)
		}
		return nil
	})
}

// Every manager restarted from its data dir still knows every job.
func TestManagersRestartedKnowTheirJobs(t *testing.T) {
	c := startCluster(t, 3, 1, 2)
	var ids []string
	for i := 0; i < 3; i++ {
		id := c.submit(fmt.Sprintf("name: j%d\ntimeout: 30s\nworkflows:\n  - {name: nap, type: sleep, cores: 1, duration: 100ms}\n", i))
		c.waitStatus(id, 30*time.Second, terminal)
		ids = append(ids, id)
	}
	var managers []string
	for _, n := range c.Nodes() {
		if n.Role == "manager" {
			managers = append(managers, n.Name)
			if err := c.Kill(n.Name); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, m := range managers {
		if err := c.Restart(m); err != nil {
			t.Fatal(err)
		}
	}
	c.leader()
	for _, id := range ids {
		if st := c.waitStatus(id, 30*time.Second, terminal); st.Status != wire.JobCompleted {
			t.Fatalf("job %s after restart: %s", id, st.Status)
		}
	}
}

// Bad inputs each get a clear error and leave the cluster serving.
func TestBadInputs(t *testing.T) {
	c := startCluster(t, 1, 1, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cases := []struct {
		name, body string
		want       string
	}{
		{"unknown key", "name: x\nworkflows:\n  - {name: a, type: sleep, duraton: 1s}\n", `unknown key "duraton"`},
		{"unknown type", "name: x\nworkflows:\n  - {name: a, type: carrier-pigeon}\n", `unknown workflow type "carrier-pigeon"`},
		{"not yaml", "name: [unclosed\n", "job.yaml"},
	}
	for _, tc := range cases {
		_, err := c.client.Submit(ctx, []byte(tc.body), "job.yaml")
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || !strings.Contains(err.Error()+fmt.Sprint(ae.Problems), tc.want) {
			t.Errorf("%s: want 400 mentioning %q, got %v", tc.name, tc.want, err)
		}
	}
	bad, err := api.NewClient(c.APIs(), "wrong-token")
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	var ae *api.Error
	if _, err := bad.Jobs(ctx); !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized {
		t.Errorf("wrong token: want 401, got %v", err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.APIs()[0]+"/v1/jobs", strings.NewReader(strings.Repeat("x", int(api.DefaultMaxBodyBytes)+1)))
	req.Header.Set("Authorization", "Bearer "+c.Token())
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized body: want 413, got %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	id := c.submit("name: ok\ntimeout: 30s\nworkflows:\n  - {name: nap, type: sleep, cores: 1, duration: 100ms}\n")
	if st := c.waitStatus(id, 30*time.Second, terminal); st.Status != wire.JobCompleted {
		t.Fatalf("cluster unhealthy after bad inputs: %s", st.Status)
	}
}

// A job too big for the free cores is QUEUED and starts when a worker with
// room joins.
func TestQueuedJobStartsWhenWorkerJoins(t *testing.T) {
	c := startCluster(t, 1, 1, 1)
	id := c.submit(`name: big
timeout: 60s
workflows:
  - {name: wide, type: sleep, cores: 3, duration: 200ms}
`)
	c.waitStatus(id, 20*time.Second, func(st *api.JobStatus) error {
		if st.Status != wire.JobQueued {
			return fmt.Errorf("job is %s, want QUEUED", st.Status)
		}
		return nil
	})
	if _, err := c.AddWorker(4); err != nil {
		t.Fatal(err)
	}
	if st := c.waitStatus(id, 40*time.Second, terminal); st.Status != wire.JobCompleted {
		t.Fatalf("queued job ended %s", st.Status)
	}
}
