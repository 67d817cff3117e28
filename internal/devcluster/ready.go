package devcluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"tempest/api"
)

// Client returns an API client over the cluster's entry points: the gates
// when there are gates, else every manager.
func (c *Cluster) Client() (*api.Client, error) {
	return api.NewClient(c.APIs(), c.opts.Token)
}

// WaitReady polls until every datacenter has exactly one manager leader
// and all its running workers registered with their cores free, and, with
// gates, until a gate leads and sees every datacenter's leader; or until
// ctx ends. It returns the last view it saw through the entry points.
func (c *Cluster) WaitReady(ctx context.Context) (*api.ClusterView, error) {
	var checks []*readyCheck
	defer func() {
		for _, ch := range checks {
			for _, cl := range ch.clients {
				cl.Close()
			}
		}
	}()
	for _, dc := range c.Datacenters() {
		// A client per manager, asked in turn (readyCheck.next): one
		// client over all of them keeps going back to the endpoint that
		// last answered, and a manager that holds requests without an
		// answer (paused, or forwarding to a leader that does) would take
		// every attempt's whole timeout, however healthy the others.
		var clients []*api.Client
		for _, u := range c.ManagerAPIs(dc) {
			client, err := api.NewClient([]string{u}, c.opts.Token)
			if err != nil {
				return nil, err
			}
			clients = append(clients, client)
		}
		want := 0
		for _, n := range c.Nodes() {
			if n.Role == "worker" && n.DC == dc && c.Running(n.Name) {
				want++
			}
		}
		checks = append(checks, &readyCheck{dc: dc, clients: clients, want: want})
	}
	var gates *api.Client
	if c.opts.Gates > 0 {
		var err error
		if gates, err = c.Client(); err != nil {
			return nil, err
		}
		defer gates.Close()
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		view, err := c.readyOnce(ctx, checks, gates)
		if err == nil {
			return view, nil
		}
		// An attempt cut short by ctx says nothing new: keep the reason
		// the cluster gave before it.
		if last == nil || ctx.Err() == nil {
			last = err
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, fmt.Errorf("devcluster: not ready: %w (last: %v)", ctx.Err(), last)
		}
	}
}

// readyCheck is one datacenter's readiness probe, over its managers' APIs.
type readyCheck struct {
	dc      string
	clients []*api.Client // one per manager
	turn    int
	want    int // workers
}

// next is the client to ask this time: each manager in turn, so one that
// does not answer is not asked every time.
func (ch *readyCheck) next() *api.Client {
	cl := ch.clients[ch.turn%len(ch.clients)]
	ch.turn++
	return cl
}

func (c *Cluster) readyOnce(ctx context.Context, checks []*readyCheck, gates *api.Client) (*api.ClusterView, error) {
	var view *api.ClusterView
	for _, ch := range checks {
		v, err := readyView(ctx, ch.next(), ch.want)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ch.dc, err)
		}
		view = v
	}
	if gates == nil {
		return view, nil
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second) // longer than the client's leader wait, so a missing leader shows as no_leader
	defer cancel()
	v, err := gates.Cluster(cctx)
	if err != nil {
		return nil, fmt.Errorf("gates: %w", err)
	}
	leaders := map[string]bool{}
	gateLeader := false
	for _, n := range v.Nodes {
		switch {
		case n.Role == "gate" && n.IsLeader && n.State == "alive":
			gateLeader = true
		case n.Role == "manager" && n.IsLeader && n.State == "alive" && n.AvailableCores > 0:
			leaders[n.DC] = true
		}
	}
	if !gateLeader {
		return nil, errors.New("no gate leads")
	}
	for _, dc := range c.Datacenters() {
		if !leaders[dc] {
			return nil, fmt.Errorf("the gates do not see a leader with free cores in %s yet", dc)
		}
	}
	return v, nil
}

func readyView(ctx context.Context, client *api.Client, wantWorkers int) (*api.ClusterView, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second) // longer than the client's leader wait, so a missing leader shows as no_leader
	defer cancel()
	view, err := client.Cluster(cctx)
	if err != nil {
		return nil, err
	}
	leaders, workers := 0, 0
	for _, n := range view.Nodes {
		switch {
		case n.Role == "manager" && n.IsLeader:
			leaders++
		case n.Role == "worker" && n.TotalCores > 0 && (n.State == "HEALTHY" || n.State == "DEGRADED"):
			workers++
		}
	}
	if leaders != 1 {
		return nil, fmt.Errorf("%d manager leaders", leaders)
	}
	if workers < wantWorkers {
		return nil, fmt.Errorf("%d of %d workers registered", workers, wantWorkers)
	}
	return view, nil
}
