package devcluster

import (
	"context"
	"fmt"
	"time"

	"tempest/api"
)

// Client returns an API client over every manager's endpoint.
func (c *Cluster) Client() (*api.Client, error) {
	return api.NewClient(c.APIs(), c.opts.Token)
}

// WaitReady polls the cluster view until exactly one manager leads and every
// worker is registered with its cores free, or ctx ends. It returns the
// last view it saw.
func (c *Cluster) WaitReady(ctx context.Context) (*api.ClusterView, error) {
	client, err := c.Client()
	if err != nil {
		return nil, err
	}
	defer client.Close()
	wantWorkers := 0
	for _, n := range c.Nodes() {
		if n.Role == "worker" && c.Running(n.Name) {
			wantWorkers++
		}
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		view, err := c.readyView(ctx, client, wantWorkers)
		if err == nil {
			return view, nil
		}
		last = err
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, fmt.Errorf("devcluster: not ready: %w (last: %v)", ctx.Err(), last)
		}
	}
}

func (c *Cluster) readyView(ctx context.Context, client *api.Client, wantWorkers int) (*api.ClusterView, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
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
