package worker

import (
	"context"
	"log/slog"
	"time"

	"tempest/security"
	"tempest/swim"
	"tempest/transport"
	"tempest/workflow"
)

// Membership is the part of a swim.Node the worker uses. *swim.Node
// implements it; tests may substitute a fake through Deps.NewMembership.
type Membership interface {
	Addr() string
	Join(ctx context.Context, addrs []string) (int, error)
	// KeepJoined joins the seeds and keeps them joined until ctx ends
	// (swim.Node.KeepJoined).
	KeepJoined(ctx context.Context, seeds []string, base, max time.Duration, cluster string, log *slog.Logger)
	Leave(timeout time.Duration) error
	Shutdown() error
	SetKeys(keys [][]byte) error
	LocalHealth() int
}

// Deps are the worker's collaborators. Keyring and Registry are required;
// the rest have production defaults and exist so tests can run the worker on
// an in-memory transport, without memberlist, against fake /proc readers.
type Deps struct {
	// Keyring seals the data plane and derives the gossip keys.
	Keyring *security.Keyring
	// Registry holds the workflow types this worker can run.
	Registry *workflow.Registry
	// Transport, if set, is used instead of a QUIC transport on
	// Config.QUICListen. Its LocalID must be Config.ID. Either way the
	// worker owns it: Run closes it on return.
	Transport transport.Transport
	// NewMembership builds the SWIM node; nil means swim.New.
	NewMembership func(swim.Config) (Membership, error)
	// Now is the wall clock for timestamps, versions and fence retention;
	// nil means time.Now.
	Now func() time.Time
	// CPU and Memory sample the host; nil means /proc/stat and /proc/meminfo
	// (on other systems the samples are missing and only the queue counts).
	CPU    func() (CPUSample, error)
	Memory func() (float64, error)
	// ExecShim is the argv prefix that applies an exec program's limits
	// before it runs (the worker binary itself with rainstorm.ExecShimArg);
	// nil sets them on the program just after it starts.
	ExecShim []string
}
