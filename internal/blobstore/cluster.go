package blobstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
)

// Cluster is one node's side of a replication group (a datacenter's
// managers, or the gates): a blob is durable once a majority of the
// members, this node counting one, hold it complete and verified.
type Cluster struct {
	Rep *Replicator
	// Peers lists the other members' transport addresses and the majority
	// of the group, read together once per decision: the group may change
	// between two calls, never within one.
	Peers func() (addrs []string, quorum int)
	// Spawn runs a function on a goroutine its owner (the role) stops at
	// shutdown; pushes that outlive a call run there.
	Spawn func(func(context.Context)) bool
	Log   *slog.Logger

	mu       sync.Mutex
	inflight map[Sum]chan struct{} // closed when that EnsureDurable ends
}

// Quorum is the majority of the group as it is now.
func (c *Cluster) Quorum() int {
	_, q := c.Peers()
	return q
}

type sourcesKey struct{}

// WithSources returns ctx carrying addresses of nodes outside the group
// that may hold blobs a call needs: the gate that sent a submission.
func WithSources(ctx context.Context, addrs ...string) context.Context {
	return context.WithValue(ctx, sourcesKey{}, addrs)
}

func sourcesFrom(ctx context.Context) []string {
	s, _ := ctx.Value(sourcesKey{}).([]string)
	return s
}

// Fetch copies sum here from the first member holding it, or else from a
// source named by WithSources.
func (c *Cluster) Fetch(ctx context.Context, sum Sum) error {
	peers, _ := c.Peers()
	holders := c.Rep.Holders(ctx, sum, peers)
	holders = append(holders, c.Rep.Holders(ctx, sum, sourcesFrom(ctx))...)
	if len(holders) == 0 {
		return fmt.Errorf("blob %s: %w on any node", sum, ErrNotFound)
	}
	var errs []error
	for _, addr := range holders {
		err := c.Rep.Fetch(ctx, addr, sum)
		if err == nil {
			if c.Log != nil {
				c.Log.Info("blob fetched", "sum", sum.String(), "from", addr)
			}
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// HasLocal reports whether this node holds sum complete.
func (c *Cluster) HasLocal(sum Sum) (bool, error) {
	_, err := c.Rep.Store.Stat(sum)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrNotFound):
		return false, nil
	}
	return false, err
}

// Holders counts the members holding sum complete, this node included.
func (c *Cluster) Holders(ctx context.Context, sum Sum) int {
	peers, _ := c.Peers()
	n := len(c.Rep.Holders(ctx, sum, peers))
	if ok, _ := c.HasLocal(sum); ok {
		n++
	}
	return n
}

// EnsureDurable makes sum durable: this node fetches it first if it lacks
// it; members that lack it get it pushed. It returns how many members hold
// it once a majority do, or an error once that cannot happen or ctx ends.
// Pushes still running then go on under Spawn, so every member catches up.
// Concurrent calls for one blob run one after the other.
func (c *Cluster) EnsureDurable(ctx context.Context, sum Sum) (int, error) {
	for {
		c.mu.Lock()
		if c.inflight == nil {
			c.inflight = map[Sum]chan struct{}{}
		}
		wait, busy := c.inflight[sum]
		if !busy {
			c.inflight[sum] = make(chan struct{})
		}
		c.mu.Unlock()
		if !busy {
			break
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return 0, fmt.Errorf("blob %s: %w", sum, context.Cause(ctx))
		}
	}
	defer func() {
		c.mu.Lock()
		close(c.inflight[sum])
		delete(c.inflight, sum)
		c.mu.Unlock()
	}()
	if ok, err := c.HasLocal(sum); err != nil {
		return 0, err
	} else if !ok {
		if err := c.Fetch(ctx, sum); err != nil {
			return 0, err
		}
	}
	peers, quorum := c.Peers()
	have := c.Rep.Holders(ctx, sum, peers)
	missing := slices.DeleteFunc(slices.Clone(peers), func(a string) bool { return slices.Contains(have, a) })
	if 1+len(have) >= quorum {
		if len(missing) > 0 {
			// Durable already; the stragglers catch up in the background.
			_, _ = c.Rep.Replicate(ctx, c.Spawn, sum, missing, 1)
		}
		return 1 + len(have), nil
	}
	n, err := c.Rep.Replicate(ctx, c.Spawn, sum, missing, quorum-len(have))
	return n + len(have), err
}
