package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"tempest/api"
	"tempest/internal/target"
	"tempest/internal/testutil"
	"tempest/wire"
)

// gatedJob is httpJob spread over datacenters.
func gatedJob(name, url string, vus int, duration string, dcs int) string {
	return strings.Replace(httpJob(name, url, vus, duration, ""), "workflows:", fmt.Sprintf("datacenters: %d\nworkflows:", dcs), 1)
}

// A job over two datacenters completes through the gates; the gate's totals
// equal the sum of the datacenters' own and the target's request count, and
// each datacenter's managers report the same numbers the gate shows.
func TestGateJobOverTwoDatacenters(t *testing.T) {
	c := startGated(t, 3, 2, 1, 1)
	tgt := startTarget(t, target.DefaultConfig())
	id := c.submit(gatedJob("two-dcs", "http://"+tgt.Addr(), 4, "2s", 2))
	st := c.waitStatus(id, 60*time.Second, terminal)
	if st.Status != wire.JobCompleted {
		t.Fatalf("job ended %s: %s", st.Status, st.Error)
	}
	if len(st.Datacenters) != 2 {
		t.Fatalf("job ran in %d datacenters, want 2: %+v", len(st.Datacenters), st.Datacenters)
	}
	var sum int64
	for _, d := range st.Datacenters {
		if d.Status != wire.JobCompleted || d.TotalCompleted == 0 {
			t.Errorf("%s: %s with %d completed", d.Name, d.Status, d.TotalCompleted)
		}
		sum += d.TotalCompleted + d.TotalFailed
		// The datacenter's own view, asked of its managers directly.
		direct, err := api.NewClient(c.ManagerAPIs(d.Name), c.Token())
		if err != nil {
			t.Fatal(err)
		}
		ds, err := direct.Job(context.Background(), id)
		direct.Close()
		if err != nil {
			t.Fatalf("%s managers: %v", d.Name, err)
		}
		if ds.TotalCompleted != d.TotalCompleted || ds.TotalFailed != d.TotalFailed {
			t.Errorf("%s: managers say %d/%d, the gate %d/%d", d.Name, ds.TotalCompleted, ds.TotalFailed, d.TotalCompleted, d.TotalFailed)
		}
	}
	total := st.TotalCompleted + st.TotalFailed
	if total != sum {
		t.Errorf("gate total %d != sum of datacenters %d", total, sum)
	}
	if got := tgt.Stats().Requests; uint64(total) != got {
		t.Errorf("gate total %d, target answered %d", total, got)
	}
	wf := st.Workflows[0]
	if wf.CompletedCount+wf.FailedCount != total || len(wf.Steps) != 1 || wf.Steps[0].Completed != wf.CompletedCount {
		t.Errorf("merged workflow %+v does not add up to %d", wf, total)
	}

	// Through a gate, `tempest cluster` lists every datacenter's workers
	// with their cores, and the managers' rows their datacenter's totals.
	testutil.Eventually(t, 20*time.Second, 200*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		view, err := c.client.Cluster(ctx)
		if err != nil {
			return err
		}
		if len(view.Unreachable) > 0 {
			return fmt.Errorf("unreachable: %v", view.Unreachable)
		}
		workers := map[string]int{}
		for _, n := range view.Nodes {
			switch {
			case n.Role == "worker" && (n.TotalCores == 0 || n.AvailableCores != n.TotalCores):
				return fmt.Errorf("worker %s of %s shows %d/%d cores with nothing running", n.Name, n.DC, n.AvailableCores, n.TotalCores)
			case n.Role == "worker":
				workers[n.DC]++
			case n.Role == "manager" && n.IsLeader && n.TotalCores == 0:
				return fmt.Errorf("manager leader %s of %s shows no cores", n.Name, n.DC)
			}
		}
		if len(workers) != 2 {
			return fmt.Errorf("workers by datacenter %v, want both datacenters' workers", workers)
		}
		return nil
	})
}

// SIGKILL of the gate leader mid-job: another gate takes the leases over
// with higher fence tokens, `tempest watch` keeps going through another
// gate, and the job completes. The deposed leader's fence tokens are then
// refused by the managers.
func TestGateLeaderKilledMidJob(t *testing.T) {
	c := startGated(t, 3, 2, 1, 1)
	tgt := startTarget(t, target.DefaultConfig())
	id := c.submit(gatedJob("gate-failover", "http://"+tgt.Addr(), 2, "8s", 2))
	before := c.waitRunning(id)
	oldTokens := map[string]uint64{}
	for _, d := range before.Datacenters {
		oldTokens[d.Name] = d.FenceToken
	}
	watch := startCLI(t, c, "watch", id)

	leader := c.gateLeader()
	if err := c.Kill(leader); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	after := c.waitStatus(id, 30*time.Second, func(st *api.JobStatus) error {
		for _, d := range st.Datacenters {
			if d.LeaseHolder == leader || d.FenceToken <= oldTokens[d.Name] {
				return fmt.Errorf("%s lease still %s/%d", d.Name, d.LeaseHolder, d.FenceToken)
			}
			// Fencing starts when the datacenter has the new lease: its
			// reports then carry the new token.
			if d.ReportedFenceToken != d.FenceToken {
				return fmt.Errorf("%s reports under token %d, the lease is %d", d.Name, d.ReportedFenceToken, d.FenceToken)
			}
		}
		return nil
	})
	t.Logf("leases moved from %s to %s in %s", leader, after.Datacenters[0].LeaseHolder, time.Since(began).Round(10*time.Millisecond))

	// A command under the old leader's token is refused by the managers.
	tr := wireNode(t, leader, c.Secret())
	for dc, token := range oldTokens {
		addr := c.managerLeaderAddr(dc)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := tr.Call(ctx, addr, &wire.CancelJob{JobID: id, Reason: "deposed gate", FenceToken: token})
		cancel()
		if wire.CodeOf(err) != wire.CodeStaleFence {
			t.Errorf("%s: cancel with the old fence token answered %v, want %s", dc, err, wire.CodeStaleFence)
		}
	}

	st := c.waitStatus(id, 60*time.Second, terminal)
	if st.Status != wire.JobCompleted {
		t.Fatalf("job ended %s: %s", st.Status, st.Error)
	}
	if got, want := uint64(st.TotalCompleted+st.TotalFailed), tgt.Stats().Requests; got != want {
		t.Errorf("gate total %d, target answered %d", got, want)
	}
	code, out, errOut := watch.wait(t, 60*time.Second)
	if code != 0 || !strings.Contains(out, "COMPLETED") {
		t.Errorf("watch exited %d; stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// Every manager of one datacenter killed mid-job: its lease expires, that
// datacenter is FAILED for the job, the other completes, and the client
// sees a partial failure (exit code 2) with the reason.
func TestGateDatacenterLost(t *testing.T) {
	c := startGated(t, 3, 2, 1, 1)
	tgt := startTarget(t, target.DefaultConfig())
	id := c.submit(gatedJob("dc-lost", "http://"+tgt.Addr(), 2, "6s", 2))
	c.waitRunning(id)
	watch := startCLI(t, c, "watch", id)
	for _, n := range c.Nodes() {
		if n.Role == "manager" && n.DC == "dc2" {
			if err := c.Kill(n.Name); err != nil {
				t.Fatal(err)
			}
		}
	}
	st := c.waitStatus(id, 60*time.Second, terminal)
	if st.Status != wire.JobFailed || !strings.Contains(st.Error, "partial failure") || !strings.Contains(st.Error, "lease expired") {
		t.Fatalf("job ended %s (%q), want FAILED for a partial failure after dc2's lease expired", st.Status, st.Error)
	}
	for _, d := range st.Datacenters {
		want := wire.JobCompleted
		if d.Name == "dc2" {
			want = wire.JobFailed
		}
		if d.Status != want {
			t.Errorf("%s ended %s (%s), want %s", d.Name, d.Status, d.Error, want)
		}
	}
	code, out, errOut := watch.wait(t, 60*time.Second)
	if code != 2 || !strings.Contains(out+errOut, "lease expired") {
		t.Errorf("watch exited %d, want 2 with the reason; stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// A gate that joins late syncs state from the others before it may lead:
// while its peers cannot answer it stays not ready and never leads; once
// they can, it learns every job; and a gate restarted with an empty data
// directory rebuilds the job table from it, so the job survives the loss
// of both gates that ran it.
func TestGateLateJoinerSyncsBeforeLeading(t *testing.T) {
	c := startGated(t, 3, 1, 1, 1)
	tgt := startTarget(t, target.DefaultConfig())
	// The late joiner is the gate that leads now, so every run submits
	// right after a gate failover: the new leader must know the
	// datacenter is healthy at once (it asks the managers as it takes
	// over), not only once SWIM carries a heartbeat to it.
	late := c.gateLeader()
	var others []string
	for _, g := range []string{"gate-1", "gate-2", "gate-3"} {
		if g != late {
			others = append(others, g)
		}
	}
	killed := time.Now()
	if err := c.Kill(late); err != nil {
		t.Fatal(err)
	}
	n3, _ := c.Node(late)
	if err := os.RemoveAll(n3.DataDir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(n3.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	id := c.submit(gatedJob("late-joiner", "http://"+tgt.Addr(), 2, "1s", 1))
	t.Logf("first submit after the gate leader was killed accepted %s later", time.Since(killed).Round(time.Millisecond))
	done := c.waitStatus(id, 60*time.Second, terminal)
	if done.Status != wire.JobCompleted {
		t.Fatalf("job ended %s: %s", done.Status, done.Error)
	}

	// Its peers frozen, the late gate cannot sync, so it may not lead.
	for _, g := range others {
		if err := c.Signal(g, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Restart(late); err != nil {
		t.Fatal(err)
	}
	lateAPI := "http://" + n3.API
	testutil.Eventually(t, 20*time.Second, 100*time.Millisecond, func() error {
		m, err := scrape(lateAPI)
		if err != nil {
			return err
		}
		if m["tempest_gate_ready"] != 0 || m["tempest_gate_is_leader"] != 0 {
			return fmt.Errorf("late gate ready=%v leader=%v while its peers are frozen", m["tempest_gate_ready"], m["tempest_gate_is_leader"])
		}
		if _, ok := m["tempest_gate_term"]; !ok {
			return errors.New("no term yet")
		}
		return nil
	})
	// Give it a few election timeouts of opportunity; it must stay out.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		m, err := scrape(lateAPI)
		if err == nil && (m["tempest_gate_ready"] != 0 || m["tempest_gate_is_leader"] != 0) {
			t.Fatalf("late gate became ready or leader without syncing: %v", m)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, g := range others {
		if err := c.Signal(g, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 30*time.Second, 100*time.Millisecond, func() error {
		m, err := scrape(lateAPI)
		if err != nil {
			return err
		}
		if m["tempest_gate_ready"] != 1 || m[`tempest_gate_jobs{status="COMPLETED"}`] != 1 {
			return fmt.Errorf("late gate not synced yet: ready=%v completed jobs=%v", m["tempest_gate_ready"], m[`tempest_gate_jobs{status="COMPLETED"}`])
		}
		return nil
	})

	// Both gates that ran the job die; one comes back with no data. The
	// late gate is the only one holding the job, and whoever leads now
	// serves it.
	for _, g := range others {
		if err := c.Kill(g); err != nil {
			t.Fatal(err)
		}
	}
	n1, _ := c.Node(others[0])
	if err := os.RemoveAll(n1.DataDir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(n1.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(others[0]); err != nil {
		t.Fatal(err)
	}
	st := c.waitStatus(id, 30*time.Second, terminal)
	if st.Status != wire.JobCompleted || st.TotalCompleted != done.TotalCompleted {
		t.Fatalf("after losing both original gates the job reads %s with %d completed, want COMPLETED with %d", st.Status, st.TotalCompleted, done.TotalCompleted)
	}
}

// gateLeader is the gate that leads now.
func (c *cluster) gateLeader() string {
	c.t.Helper()
	var name string
	testutil.Eventually(c.t, 20*time.Second, 100*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		view, err := c.client.Cluster(ctx)
		if err != nil {
			return err
		}
		for _, n := range view.Nodes {
			if n.Role == "gate" && n.IsLeader && c.Running(n.Name) {
				name = n.Name
				return nil
			}
		}
		return errors.New("no gate leads")
	})
	return name
}

// managerLeaderAddr is the QUIC address of dc's manager leader.
func (c *cluster) managerLeaderAddr(dc string) string {
	c.t.Helper()
	direct, err := api.NewClient(c.ManagerAPIs(dc), c.Token())
	if err != nil {
		c.t.Fatal(err)
	}
	defer direct.Close()
	var addr string
	testutil.Eventually(c.t, 20*time.Second, 100*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		view, err := direct.Cluster(ctx)
		if err != nil {
			return err
		}
		for _, n := range view.Nodes {
			if n.Role == "manager" && n.IsLeader {
				addr = n.Addr
				return nil
			}
		}
		return fmt.Errorf("no manager leads %s", dc)
	})
	return addr
}

// cliRun is a tempest CLI process running in the background.
type cliRun struct {
	cmd      *exec.Cmd
	out, err testutil.SyncBuffer
	done     chan error
}

// startCLI starts the tempest binary against the cluster's entry points.
func startCLI(t *testing.T, c *cluster, args ...string) *cliRun {
	t.Helper()
	r := &cliRun{done: make(chan error, 1)}
	r.cmd = exec.Command(filepath.Join(binDir, "tempest"), args...)
	r.cmd.Env = append(c.Env(), "TEMPEST_API="+strings.Join(c.APIs(), ","))
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.err
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.done <- r.cmd.Wait() }()
	t.Cleanup(func() {
		if r.cmd.ProcessState == nil {
			r.cmd.Process.Kill()
			<-r.done
		}
	})
	return r
}

// wait returns the exit code and output once the process ends.
func (r *cliRun) wait(t *testing.T, within time.Duration) (int, string, string) {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		var exit *exec.ExitError
		switch {
		case err == nil:
			return 0, r.out.String(), r.err.String()
		case errors.As(err, &exit):
			return exit.ExitCode(), r.out.String(), r.err.String()
		}
		t.Fatalf("tempest %v: %v", r.cmd.Args[1:], err)
	case <-time.After(within):
		t.Fatalf("tempest %v still running after %s; stdout so far:\n%s", r.cmd.Args[1:], within, r.out.String())
	}
	return 0, "", ""
}

// scrape reads a node's /metrics into series name (with labels) -> value.
func scrape(base string) (map[string]float64, error) {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("%s/metrics: %q: %w", base, line, err)
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// An abort_on_fail threshold is judged by the gate on the results merged
// across datacenters: failing, it ends the job in both early, and
// `tempest submit --wait` exits 1 (thresholds), not 2.
func TestGateAbortsOnMergedThresholds(t *testing.T) {
	c := startGated(t, 3, 2, 1, 1)
	tgt := startTarget(t, target.DefaultConfig())
	job := gatedJob("abort", "http://"+tgt.Addr(), 2, "30s", 2) +
		"    thresholds:\n      - {threshold: \"rps > 10000000\", abort_on_fail: true}\n"
	path := filepath.Join(t.TempDir(), "abort.yaml")
	if err := os.WriteFile(path, []byte(job), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, c, "submit", path, "--wait")
	if code != 1 || !strings.Contains(out+errOut, "threshold failed: rps > 10000000") {
		t.Fatalf("submit --wait exited %d, want 1 naming the threshold; stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	jobs, err := c.client.Jobs(context.Background())
	if err != nil || len(jobs) != 1 {
		t.Fatalf("jobs: %v, %v", jobs, err)
	}
	st := jobs[0]
	if st.Status != wire.JobFailed || !st.ThresholdAbort || len(st.Datacenters) != 2 {
		t.Fatalf("job %s (abort %v) over %d datacenters: %s", st.Status, st.ThresholdAbort, len(st.Datacenters), st.Error)
	}
	// Ended early: neither datacenter ran its 30 s to completion.
	for _, d := range st.Datacenters {
		if d.Status != wire.JobCancelled {
			t.Errorf("%s ended %s (%s), want CANCELLED by the abort", d.Name, d.Status, d.Error)
		}
	}
}
