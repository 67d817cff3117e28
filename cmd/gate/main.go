// Command tempest-gate runs a Tempest gate: one of the gates (a cluster of
// 1, 3 or 5) that take jobs from clients, elect a leader, and drive each
// job in one or more datacenters under fenced leases (docs/gate.md).
//
// Configuration comes from a YAML file (--config) with flags overriding it.
// Secrets come from the environment or, over it, from --secret-file (read at
// start-up as well as on SIGHUP): AUTH_SECRET (and, during a
// rotation, AUTH_SECRET_PREVIOUS) for the cluster, TEMPEST_TOKEN for the API.
// Signals: SIGTERM or SIGINT stop the API, give up leadership, leave SWIM
// and exit 0; a second one exits at once. SIGHUP reloads the secrets from
// --secret-file, or from the environment when no file is given.
package main

import (
	"flag"
	"io"
	"os"
	"time"

	"tempest/cmd/internal/nodecmd"
	"tempest/gate"
	"tempest/internal/nodeconfig"
)

func main() {
	os.Exit(run(os.Args[1:], nodecmd.TakeSecrets(), os.Stderr, nodecmd.Signals(), nil))
}

// binary is the gate as nodecmd runs it.
func binary() nodecmd.Binary[gate.Config] {
	return nodecmd.Binary[gate.Config]{
		Name: "tempest-gate", Role: "gate",
		Defaults: gate.DefaultConfig,
		Server:   func(c *gate.Config) *nodeconfig.Server { return &c.Server },
		Flags: func(fs *flag.FlagSet) func(*gate.Config) {
			leaseTTL := fs.Duration("lease-ttl", 0, "how long a datacenter's lease lasts without a progress report")
			return func(c *gate.Config) {
				if nodecmd.Given(fs, "lease-ttl") {
					c.LeaseTTL = *leaseTTL
				}
			}
		},
		Start: func(cfg gate.Config, node nodecmd.Node) (nodecmd.Started, error) {
			g, err := gate.New(cfg, gate.Deps{Keyring: node.Keyring})
			if err != nil {
				return nodecmd.Started{}, err
			}
			return nodecmd.Started{Role: g, Attrs: []any{"quic", g.Addr(), "swim", g.SwimAddr()}}, nil
		},
		Shutdown: 15 * time.Second,
	}
}

// run is main without the process: ready, if not nil, receives the API URL
// once the gate serves.
func run(args []string, getenv func(string) string, stderr io.Writer, sigs <-chan os.Signal, ready chan<- string) int {
	return binary().Main(args, nodecmd.Process{Getenv: getenv, Stderr: stderr, Sigs: sigs, Ready: ready})
}

// loadConfig reads the flags and --config (the gate's keys and the API
// server's TLS files) and validates the result.
func loadConfig(args []string, stderr io.Writer) (gate.Config, nodecmd.Options, error) {
	return binary().Load(args, stderr)
}
