// Command tempest-manager runs a Tempest manager: one of its datacenter's
// managers (a cluster of 1, 3 or 5), which elect a leader that places jobs
// on workers with quorum confirmation, and serve the client API.
//
// Configuration comes from a YAML file (--config) with flags overriding it.
// Secrets come from the environment or, over it, from --secret-file (read at
// start-up as well as on SIGHUP): AUTH_SECRET (and, during a
// rotation, AUTH_SECRET_PREVIOUS) for the cluster, TEMPEST_TOKEN for the API
// (--token exists for development, but a command line is visible to every
// user of the machine). Signals: SIGTERM or SIGINT stop the API, give up
// leadership, leave SWIM and exit 0; a second one exits at once. SIGHUP
// reloads the secrets from --secret-file, or from the process environment
// when no file is given, for a key rotation.
package main

import (
	"flag"
	"io"
	"os"
	"time"

	"tempest/cmd/internal/nodecmd"
	"tempest/internal/nodeconfig"
	"tempest/manager"
	"tempest/rainstorm"
)

// exitFailure is the code of a start the manager refuses.
const exitFailure = nodecmd.ExitFailure

func main() {
	os.Exit(run(os.Args[1:], nodecmd.TakeSecrets(), os.Stderr, nodecmd.Signals(), nil))
}

// binary is the manager as nodecmd runs it.
func binary() nodecmd.Binary[manager.Config] {
	return nodecmd.Binary[manager.Config]{
		Name: "tempest-manager", Role: "manager",
		Defaults: manager.DefaultConfig,
		Server:   func(c *manager.Config) *nodeconfig.Server { return &c.Server },
		Flags: func(fs *flag.FlagSet) func(*manager.Config) {
			dc := fs.String("dc", "", "datacenter")
			return func(c *manager.Config) {
				if nodecmd.Given(fs, "dc") {
					c.Datacenter = *dc
				}
			}
		},
		Start: func(cfg manager.Config, node nodecmd.Node) (nodecmd.Started, error) {
			m, err := manager.New(cfg, manager.Deps{Keyring: node.Keyring, Registry: rainstorm.Registry(rainstorm.ParseOptions{})})
			if err != nil {
				return nodecmd.Started{}, err
			}
			return nodecmd.Started{Role: m, Attrs: []any{"quic", m.Addr()}}, nil
		},
		// The graceful part of a shutdown: API requests in flight, then the
		// manager's own work and SWIM leave.
		Shutdown: 15 * time.Second,
	}
}

// run is main without the process: ready, if not nil, receives the API URL
// once the manager serves (tests use it).
func run(args []string, getenv func(string) string, stderr io.Writer, sigs <-chan os.Signal, ready chan<- string) int {
	return binary().Main(args, nodecmd.Process{Getenv: getenv, Stderr: stderr, Sigs: sigs, Ready: ready})
}

// loadConfig reads the flags and --config (the manager's keys and the API
// server's TLS files) and validates the result.
func loadConfig(args []string, stderr io.Writer) (manager.Config, nodecmd.Options, error) {
	return binary().Load(args, stderr)
}
