package blobstore

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	"tempest/transport"
	"tempest/wire"
)

// Node is one role's blob side, the same for a manager among its
// datacenter's managers and for a gate among the gates: the store under its
// data dir, replication to the group and the group's durability rule. The
// role adds who its members are and what its jobs reference.
type Node struct {
	Store   *Store
	Rep     *Replicator
	Cluster *Cluster
}

// NodeConfig is what a role hands OpenNode.
type NodeConfig struct {
	// DataDir is the role's data directory; blobs live in its "blobs".
	DataDir string
	Tr      transport.Transport
	Log     *slog.Logger
	Now     func() time.Time
	// Peers and Spawn are the Cluster's.
	Peers func() (addrs []string, quorum int)
	Spawn func(func(context.Context)) bool
	// Limits bound what uploads may take of the disk.
	Limits Limits
}

// How long an upload nobody appends to is kept, and how often a role looks
// for blobs to remove.
const (
	PartialTTL = time.Hour
	GCEvery    = 10 * time.Minute
)

// OpenNode opens the store in the data dir and joins it to the group.
func OpenNode(c NodeConfig) (*Node, error) {
	st, err := Open(filepath.Join(c.DataDir, "blobs"), c.Log, c.Now)
	if err != nil {
		return nil, err
	}
	st.SetLimits(c.Limits)
	rep := &Replicator{Store: st, Tr: c.Tr, Log: c.Log}
	return &Node{Store: st, Rep: rep, Cluster: &Cluster{Rep: rep, Peers: c.Peers, Spawn: c.Spawn, Log: c.Log}}, nil
}

// HandleGet serves a range read (wire.TypeBlobChunkGet). A node outside the
// group asking for a blob this node lacks — a worker reading from a new
// manager leader, a manager reading through a gate outside the majority
// that stored it — gets it after this node fetched it from the group. A
// member asking is itself looking for a holder: it is never made to wait on
// a fetch (two members asking each other would recurse).
func (n *Node) HandleGet(isMember func(id string) bool) func(context.Context, transport.Peer, *wire.BlobChunkGet) (wire.Message, error) {
	return func(ctx context.Context, from transport.Peer, msg *wire.BlobChunkGet) (wire.Message, error) {
		sum, err := SumFromBytes(msg.Sum)
		if err != nil {
			return nil, wire.Errorf(wire.CodeMalformed, "%v", err)
		}
		if ok, _ := n.Cluster.HasLocal(sum); !ok && !isMember(from.NodeID) {
			if err := n.Cluster.Fetch(ctx, sum); err != nil {
				return nil, wire.Errorf(wire.CodeNotFound, "blob %s: %v", sum, err)
			}
		}
		return n.Rep.HandleGet(ctx, from, msg)
	}
}

// Collect removes the blobs live does not name (sums in hex, as job params
// carry them; one that does not parse names nothing) once retention has
// passed since their upload, and uploads nobody appended to for PartialTTL.
func (n *Node) Collect(live []string, retention time.Duration) (GCResult, error) {
	keep := make(map[Sum]bool, len(live))
	for _, s := range live {
		if sum, err := ParseSum(s); err == nil {
			keep[sum] = true
		}
	}
	return n.Store.GC(GCPolicy{
		Live:       func(s Sum) bool { return keep[s] },
		Retention:  retention,
		PartialTTL: PartialTTL,
	})
}
