package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// tpConfig shapes one throughput measurement.
type tpConfig struct {
	Workflows int           // per job
	Sleep     time.Duration // each workflow's duration
	Warmup    time.Duration
	Window    time.Duration
}

// tpRep is one throughput window.
type tpRep struct {
	Concurrency int           `json:"concurrency"`
	Rep         int           `json:"rep"`
	Window      time.Duration `json:"window_ns"`
	// Started is how many workflows reached RUNNING (or beyond) inside the
	// window, by the leader's /metrics; Rate is Started per second.
	Started float64 `json:"started"`
	Rate    float64 `json:"rate"`
	// PerSecond are the rates of each whole second of the window.
	PerSecond []float64 `json:"per_second"`
	// Jobs is how many Submit calls returned inside the window, and
	// SubmitLatency their durations (a job of Workflows workflows, under
	// this load).
	Jobs          int      `json:"jobs"`
	SubmitLatency dist     `json:"submit_latency"`
	Errors        []string `json:"errors,omitempty"`
	// Failed and Retried count workflows that FAILED or went back to
	// PENDING during the rep (both should be 0).
	Failed float64 `json:"failed"`
	// CPU per process group during the window, and the host's busy share.
	CPU       map[string]time.Duration `json:"cpu_ns"`
	HostBusy  float64                  `json:"host_busy_pct"`
	HostSteal float64                  `json:"host_steal_pct"`
	// Messages sent and received by the leader's and the followers'
	// transports during the window.
	LeaderOut    float64 `json:"leader_msgs_out"`
	LeaderIn     float64 `json:"leader_msgs_in"`
	FollowersOut float64 `json:"followers_msgs_out"`
	FollowersIn  float64 `json:"followers_msgs_in"`
	Load         string  `json:"load"`
	// Disturbed says why the rep is left out of the medians (an election
	// during it).
	Disturbed string `json:"disturbed,omitempty"`
}

// snapshot is everything read at one edge of a window.
type snapshot struct {
	at        time.Time
	leader    metrics
	followers []metrics
	cpu       map[string]time.Duration
	host      hostCPU
}

func (c *cluster) snapshot(ctx context.Context) (snapshot, error) {
	s := snapshot{cpu: make(map[string]time.Duration)}
	for _, n := range c.all() {
		s.cpu[n.Role] += procCPU(n.PID)
		if n.Name == c.leader.Name {
			s.cpu["leader"] += procCPU(n.PID)
		}
	}
	s.cpu["bench"] = procCPU(os.Getpid())
	s.host = readHostCPU()
	before := time.Now()
	m, err := c.scrape(ctx, c.leader)
	if err != nil {
		return s, err
	}
	// The scrape's moment is taken as the middle of the request.
	s.at = before.Add(time.Since(before) / 2)
	s.leader = m
	for _, f := range c.followers {
		fm, err := c.scrape(ctx, f)
		if err != nil {
			return s, err
		}
		s.followers = append(s.followers, fm)
	}
	return s, nil
}

// waitIdle waits until the leader has no workflow pending, assigned or
// running, so reps do not inherit each other's work.
func (c *cluster) waitIdle(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		m, err := c.scrape(ctx, c.leader)
		if err != nil {
			return err
		}
		busy := m.workflows("PENDING") + m.workflows("ASSIGNED") + m.workflows("RUNNING")
		if busy == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster still has %.0f workflows pending or running after %s", busy, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// windowHooks run at the window's edges (the diagnostic pass attaches
// profilers there).
type windowHooks struct {
	start func() error
	end   func() error
}

// runThroughput runs conc submitters, each submitting jobs of cfg.Workflows
// sleep workflows back to back, and measures how fast workflows reach
// RUNNING in a window after a warm-up.
func runThroughput(ctx context.Context, c *cluster, conc, rep int, cfg tpConfig, hooks *windowHooks) (tpRep, error) {
	r := tpRep{Concurrency: conc, Rep: rep, Load: loadAvg()}
	if err := c.waitIdle(ctx, 60*time.Second); err != nil {
		return r, err
	}
	base, err := c.scrape(ctx, c.leader)
	if err != nil {
		return r, err
	}

	type done struct {
		at  time.Time
		dur time.Duration
		err error
	}
	var mu sync.Mutex
	var results []done
	var stop atomic.Bool
	var wg sync.WaitGroup
	var seq atomic.Int64
	for g := range conc {
		wg.Go(func() {
			for !stop.Load() && ctx.Err() == nil {
				job := sleepJob(fmt.Sprintf("tp-c%d-r%d-g%d-%d", conc, rep, g, seq.Add(1)), cfg.Workflows, cfg.Sleep)
				start := time.Now()
				sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				_, err := c.client.Submit(sctx, job, "tp.yaml")
				cancel()
				end := time.Now()
				mu.Lock()
				results = append(results, done{at: end, dur: end.Sub(start), err: err})
				mu.Unlock()
				if err != nil {
					// Do not hammer a refusing leader; the error is reported.
					time.Sleep(100 * time.Millisecond)
				}
			}
		})
	}
	finish := func() {
		stop.Store(true)
		wg.Wait()
	}

	select {
	case <-ctx.Done():
		finish()
		return r, ctx.Err()
	case <-time.After(cfg.Warmup):
	}
	if hooks != nil && hooks.start != nil {
		if err := hooks.start(); err != nil {
			finish()
			return r, err
		}
	}
	s0, err := c.snapshot(ctx)
	if err != nil {
		finish()
		return r, err
	}
	// Scrape once a second for the per-second rates; the last scrape is the
	// window's end.
	prev := s0
	var s1 snapshot
	secs := max(1, int(math.Round(cfg.Window.Seconds())))
	for i := range secs {
		next := s0.at.Add(time.Duration(i+1) * cfg.Window / time.Duration(secs))
		select {
		case <-ctx.Done():
			finish()
			return r, ctx.Err()
		case <-time.After(time.Until(next)):
		}
		var s snapshot
		if i == secs-1 {
			s, err = c.snapshot(ctx)
		} else {
			s.at = time.Now()
			s.leader, err = c.scrape(ctx, c.leader)
			s.at = s.at.Add(time.Since(s.at) / 2)
		}
		if err != nil {
			finish()
			return r, err
		}
		r.PerSecond = append(r.PerSecond, (s.leader.started()-prev.leader.started())/s.at.Sub(prev.at).Seconds())
		prev = s
		s1 = s
	}
	if hooks != nil && hooks.end != nil {
		if err := hooks.end(); err != nil {
			finish()
			return r, err
		}
	}
	finish()

	r.Window = s1.at.Sub(s0.at)
	r.Started = s1.leader.started() - s0.leader.started()
	r.Rate = r.Started / r.Window.Seconds()
	r.CPU = make(map[string]time.Duration)
	for k, v := range s1.cpu {
		r.CPU[k] = v - s0.cpu[k]
	}
	r.HostBusy, r.HostSteal = busyPct(s0.host, s1.host)
	r.LeaderOut = s1.leader.msgsOut() - s0.leader.msgsOut()
	r.LeaderIn = s1.leader.msgsIn() - s0.leader.msgsIn()
	for i := range s1.followers {
		r.FollowersOut += s1.followers[i].msgsOut() - s0.followers[i].msgsOut()
		r.FollowersIn += s1.followers[i].msgsIn() - s0.followers[i].msgsIn()
	}
	var lat []time.Duration
	for _, d := range results {
		if d.err != nil {
			if len(r.Errors) < 5 {
				r.Errors = append(r.Errors, d.err.Error())
			}
			continue
		}
		if !d.at.Before(s0.at) && !d.at.After(s1.at) {
			lat = append(lat, d.dur)
		}
	}
	r.Jobs = len(lat)
	r.SubmitLatency = summarize(lat)
	if r.Disturbed, err = c.leadershipChanged(ctx); err != nil || r.Disturbed != "" {
		return r, err
	}
	if err := c.waitIdle(ctx, 60*time.Second); err != nil {
		return r, err
	}
	end, err := c.scrape(ctx, c.leader)
	if err != nil {
		return r, err
	}
	r.Failed = end.workflows("FAILED") - base.workflows("FAILED")
	return r, nil
}
