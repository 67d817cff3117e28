package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"tempest/api"
	"tempest/wire"
)

// latSample is one job of the latency run.
type latSample struct {
	JobID string `json:"job_id"`
	// Start is the wall clock just before Submit was called.
	Start time.Time `json:"start"`
	// Submit is how long the Submit call took; AllRunning is from Start
	// until a Watch event showed every workflow RUNNING or beyond.
	Submit     time.Duration `json:"submit_ns"`
	AllRunning time.Duration `json:"all_running_ns"`
	// FirstEvent reports that the stream's first status already had every
	// workflow started (Submit only answers once placement is over).
	FirstEvent bool `json:"first_event_all_running"`
	Events     int  `json:"events"`
}

func allStarted(st api.JobStatus, want int) bool {
	if len(st.Workflows) != want {
		return false
	}
	for _, w := range st.Workflows {
		switch w.Status {
		case wire.WorkflowPending, wire.WorkflowAssigned:
			return false
		}
	}
	return true
}

// runLatency submits n jobs of wfs sleep workflows one after another. Each
// sample is timed from the Submit call until a Watch event shows every
// workflow RUNNING (or already finished). Unless overlap is set, the next job
// is submitted only once the previous one has ended, so every sample sees
// an otherwise idle cluster.
func runLatency(ctx context.Context, c *cluster, n, wfs int, sleep time.Duration, overlap bool) ([]latSample, error) {
	var out []latSample
	for i := range n {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		s := latSample{Start: time.Now()}
		job := sleepJob(fmt.Sprintf("lat-%d", i), wfs, sleep)
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		id, err := c.client.Submit(sctx, job, "lat.yaml")
		s.Submit = time.Since(s.Start)
		if err != nil {
			cancel()
			return out, fmt.Errorf("latency job %d: submit: %w", i, err)
		}
		s.JobID = id
		seen := false
		var jobErr error
		wctx, wcancel := context.WithCancel(sctx)
		err = c.client.Watch(wctx, id, func(st api.JobStatus) {
			s.Events++
			if !seen && allStarted(st, wfs) {
				seen = true
				s.AllRunning = time.Since(s.Start)
				s.FirstEvent = s.Events == 1
				if overlap {
					wcancel()
				}
			}
			if st.Status.Terminal() && st.Status != wire.JobCompleted {
				jobErr = fmt.Errorf("job %s ended %s: %s", id, st.Status, st.Error)
			}
		})
		wcancel()
		cancel()
		if err != nil && !(overlap && seen && errors.Is(err, context.Canceled)) {
			return out, fmt.Errorf("latency job %d (%s): watch: %w", i, id, err)
		}
		if jobErr != nil {
			return out, fmt.Errorf("latency job %d: %w", i, jobErr)
		}
		if !seen {
			return out, fmt.Errorf("latency job %d (%s): never saw every workflow started", i, id)
		}
		out = append(out, s)
	}
	return out, nil
}

// phases splits each sample's time using the leader's own log lines, which
// carry millisecond timestamps from the same host clock:
//
//	intake      Start → manager "job submitted" (HTTP, YAML parse, validation,
//	            job + workflow records committed: one fsync'd batch)
//	replicate   → "job status" to DISPATCHING (JobSubmission to both peers, each
//	            commits it; the leader waits for both)
//	first       → first "workflow dispatched" (the first placement: its status
//	            commit, ProvisionRequest quorum round trip, ASSIGNED commit,
//	            ProvisionCommit round trip with the peers' commits, dispatch round
//	            trip to the worker, RUNNING commit)
//	spread      first → last "workflow dispatched"
//	close       last dispatched → Submit returned (the job's RUNNING status
//	            commit, the HTTP answer)
//	watch       Submit returned → the Watch event with every workflow started
type phaseSet struct {
	Intake, Replicate, First, Spread, Close, Watch []time.Duration
	Matched                                        int
}

type logEvents struct {
	submitted, dispatching time.Time
	dispatched             []time.Time
}

func phases(logPath string, samples []latSample) (phaseSet, error) {
	var ps phaseSet
	want := make(map[string]bool, len(samples))
	for _, s := range samples {
		want[s.JobID] = true
	}
	ev, err := readLeaderLog(logPath, want)
	if err != nil {
		return ps, err
	}
	for _, s := range samples {
		e, ok := ev[s.JobID]
		if !ok || e.submitted.IsZero() || e.dispatching.IsZero() || len(e.dispatched) == 0 {
			continue
		}
		first, last := e.dispatched[0], e.dispatched[0]
		for _, t := range e.dispatched {
			if t.Before(first) {
				first = t
			}
			if t.After(last) {
				last = t
			}
		}
		ret := s.Start.Add(s.Submit)
		ps.Matched++
		ps.Intake = append(ps.Intake, e.submitted.Sub(s.Start))
		ps.Replicate = append(ps.Replicate, e.dispatching.Sub(e.submitted))
		ps.First = append(ps.First, first.Sub(e.dispatching))
		ps.Spread = append(ps.Spread, last.Sub(first))
		ps.Close = append(ps.Close, ret.Sub(last))
		ps.Watch = append(ps.Watch, s.AllRunning-s.Submit)
	}
	return ps, nil
}

// readLeaderLog picks the lines of the wanted jobs out of a manager's text
// log (slog TextHandler: time=… level=… msg=… key=value …).
func readLeaderLog(path string, want map[string]bool) (map[string]*logEvents, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := make(map[string]*logEvents)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		id := attr(line, "job_id")
		if id == "" || !want[id] {
			continue
		}
		ts, err := time.Parse(time.RFC3339Nano, attr(line, "time"))
		if err != nil {
			continue
		}
		e := out[id]
		if e == nil {
			e = &logEvents{}
			out[id] = e
		}
		switch {
		case strings.Contains(line, `msg="job submitted"`) && strings.Contains(line, " timeout="):
			// The manager's line; the API's own has remote= instead.
			e.submitted = ts
		case strings.Contains(line, `msg="job status"`) && attr(line, "to") == "DISPATCHING":
			e.dispatching = ts
		case strings.Contains(line, `msg="workflow dispatched"`):
			e.dispatched = append(e.dispatched, ts)
		}
	}
	return out, sc.Err()
}

// attr returns the value of key=value in a slog text line (unquoted values
// only, which is all this needs).
func attr(line, key string) string {
	i := strings.Index(line, " "+key+"=")
	if i < 0 {
		if !strings.HasPrefix(line, key+"=") {
			return ""
		}
		i = -1
	}
	v := line[i+len(key)+2:]
	if j := strings.IndexByte(v, ' '); j >= 0 {
		v = v[:j]
	}
	return strings.Trim(v, `"`)
}
