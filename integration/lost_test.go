package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"tempest/api"
	"tempest/internal/target"
	"tempest/wire"
)

// holdingTarget is the built-in target behind a door: the first open
// requests pass, later ones wait (counted on arrival, as a target's access
// log would have them) until the door opens or their client goes away.
type holdingTarget struct {
	arrived atomic.Int64
	open    int64
	door    chan struct{}
}

func startHoldingTarget(t *testing.T, open int64) (*holdingTarget, string) {
	t.Helper()
	inner, err := target.New(target.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	h := &holdingTarget{open: open, door: make(chan struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.arrived.Add(1) > h.open {
			select {
			case <-h.door:
			case <-r.Context().Done():
				return
			}
		}
		inner.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() {
		h.release()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return h, ln.Addr().String()
}

func (h *holdingTarget) release() {
	select {
	case <-h.door:
	default:
		close(h.door)
	}
}

// SIGKILL of the worker running a load workflow, through a gate: the lost
// attempt's last reported counts stay in the results (marked as a lost
// attempt, on the worker that died), the retry runs only the iterations
// left, the gate and the manager agree on the attempts, and the target's
// count exceeds the reported one by no more than what was in flight when
// the worker died (its VUs' requests; here the last report covers every
// answered request, since the target holds the rest).
func TestWorkerKilledMidLoadKeepsItsCounts(t *testing.T) {
	const vus, iterations, before = 2, 300, 100
	c := startGated(t, 1, 1, 1, 2)
	tgt, addr := startHoldingTarget(t, before)
	id := c.submit(fmt.Sprintf(`name: lost-worker
timeout: 60s
workflows:
  - name: load
    type: http
    cores: 1
    vus: %d
    iterations: %d
    steps:
      - {name: get, method: GET, url: "http://%s/"}
`, vus, iterations, addr))

	direct := func(cond func(*api.WorkflowStatus) error) *api.WorkflowStatus {
		var wf *api.WorkflowStatus
		c.waitStatus(id, 40*time.Second, func(*api.JobStatus) error {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			st, err := c.direct.Job(ctx, id)
			if err != nil {
				return err
			}
			if len(st.Workflows) != 1 {
				return fmt.Errorf("%d workflows", len(st.Workflows))
			}
			wf = &st.Workflows[0]
			return cond(wf)
		})
		return wf
	}
	// The target answered the first 100 and holds the next ones: once the
	// manager has a report of all 100, the worker has nothing unreported
	// but the requests in flight.
	running := direct(func(wf *api.WorkflowStatus) error {
		if wf.CompletedCount != before || wf.Worker == "" {
			return fmt.Errorf("%d completed on %q", wf.CompletedCount, wf.Worker)
		}
		return nil
	})
	victim := running.Worker
	if err := c.Kill(victim); err != nil {
		t.Fatal(err)
	}
	lost := direct(func(wf *api.WorkflowStatus) error {
		if len(wf.LostAttempts) == 0 {
			return fmt.Errorf("no lost attempt yet (%s on %q)", wf.Status, wf.Worker)
		}
		return nil
	})
	if la := lost.LostAttempts[0]; la.Worker != victim || la.CompletedCount != before || la.Iterations != before {
		t.Fatalf("lost attempt %+v, want %d requests and iterations on %s", la, before, victim)
	}
	if lost.CompletedCount < before {
		t.Fatalf("the count fell to %d after the worker died; the lost attempt's %d are kept", lost.CompletedCount, before)
	}
	tgt.release()

	st := c.waitStatus(id, 40*time.Second, terminal)
	if st.Status != wire.JobCompleted {
		t.Fatalf("job ended %s: %s", st.Status, st.Error)
	}
	wf := st.Workflows[0]
	reported, arrived := wf.CompletedCount+wf.FailedCount, tgt.arrived.Load()
	t.Logf("reported %d, target received %d (gap %d, bound %d)", reported, arrived, arrived-reported, vus)
	if wf.CompletedCount != iterations || wf.FailedCount != 0 {
		t.Fatalf("counted %d completed and %d failed, want the %d iterations once each", wf.CompletedCount, wf.FailedCount, iterations)
	}
	if arrived < reported || arrived > reported+vus {
		t.Fatalf("the target received %d requests, the job reported %d: want reported <= target <= reported + %d (in flight)", arrived, reported, vus)
	}
	if wf.Worker == "" || strings.Contains(wf.Worker, victim) || wf.Attempts != 2 {
		t.Fatalf("through the gate: worker %q, %d attempts; want attempt 2 away from %s", wf.Worker, wf.Attempts, victim)
	}
	if len(wf.LostAttempts) != 1 || wf.LostAttempts[0].Worker != "dc1/"+victim || wf.LostAttempts[0].CompletedCount != before {
		t.Fatalf("through the gate: lost attempts %+v, want attempt 1 on dc1/%s with %d", wf.LostAttempts, victim, before)
	}
	final := direct(func(wf *api.WorkflowStatus) error {
		if !wf.Status.Terminal() {
			return fmt.Errorf("%s", wf.Status)
		}
		return nil
	})
	if final.Attempts != wf.Attempts || final.CompletedCount != wf.CompletedCount || len(final.LostAttempts) != 1 {
		t.Fatalf("the manager says %d attempts, %d completed, lost %+v; the gate %d, %d", final.Attempts, final.CompletedCount,
			final.LostAttempts, wf.Attempts, wf.CompletedCount)
	}
	gateLost := wf.LostAttempts[0]
	gateLost.Worker = strings.TrimPrefix(gateLost.Worker, "dc1/")
	if !reflect.DeepEqual(gateLost, final.LostAttempts[0]) {
		t.Fatalf("lost attempt through the gate %+v, from the manager %+v", gateLost, final.LostAttempts[0])
	}

	// The CLI's summary says whose counts are kept.
	code, out, _ := startCLI(t, c, "status", id).wait(t, 20*time.Second)
	if want := fmt.Sprintf("load: attempt 1 on dc1/%s was lost", victim); code != 0 || !strings.Contains(out, want) {
		t.Fatalf("tempest status: exit %d, output:\n%s\nwant a line %q", code, out, want)
	}
}
