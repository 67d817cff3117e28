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
)

const shutdownTimeout = 15 * time.Second

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stderr, nodecmd.Signals(), nil))
}

// fileConfig is the config file: the gate's options plus the API server's
// TLS files.
type fileConfig struct {
	gate.Config      `yaml:",inline"`
	nodecmd.TLSFiles `yaml:",inline"`
}

// run is main without the process: ready, if not nil, receives the API URL
// once the gate serves.
func run(args []string, getenv func(string) string, stderr io.Writer, sigs <-chan os.Signal, ready chan<- string) int {
	start := func(cfg gate.Config, node nodecmd.Node) (nodecmd.Started, error) {
		cfg.Logger = node.Base
		g, err := gate.New(cfg, gate.Deps{Keyring: node.Keyring})
		if err != nil {
			return nodecmd.Started{}, err
		}
		return nodecmd.Started{Role: g, APIListen: cfg.APIListen, Advertised: cfg.APIAdvertise != "",
			Attrs: []any{"quic", g.Addr(), "swim", g.SwimAddr()}}, nil
	}
	p := nodecmd.Process{Getenv: getenv, Stderr: stderr, Sigs: sigs, Ready: ready}
	return nodecmd.Main("tempest-gate", "gate", args, p, shutdownTimeout, loadConfig, func(c gate.Config) string { return c.ID }, start)
}

// loadConfig reads --config, then applies the flags that were given.
func loadConfig(args []string, stderr io.Writer) (gate.Config, nodecmd.Options, error) {
	fs := flag.NewFlagSet("tempest-gate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	flags := nodecmd.NewFlags(fs, "gate")
	leaseTTL := fs.Duration("lease-ttl", 0, "how long a datacenter's lease lasts without a progress report")
	if err := flags.Parse(args); err != nil {
		return gate.Config{}, nodecmd.Options{}, err
	}
	fc := fileConfig{Config: gate.DefaultConfig()}
	if err := flags.ReadConfig(&fc, &fc.TLSFiles); err != nil {
		return gate.Config{}, nodecmd.Options{}, err
	}
	cfg := fc.Config
	if err := flags.Apply(nodecmd.Fields{ID: &cfg.ID, QUICListen: &cfg.QUICListen, SwimBind: &cfg.SwimBind,
		APIListen: &cfg.APIListen, DataDir: &cfg.DataDir, SwimProfile: &cfg.SwimProfile,
		ElectionProfile: &cfg.ElectionProfile, Join: &cfg.Join, Peers: &cfg.Peers}, "gate"); err != nil {
		return gate.Config{}, nodecmd.Options{}, err
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "lease-ttl" {
			cfg.LeaseTTL = *leaseTTL
		}
	})
	if err := cfg.Validate(); err != nil {
		return gate.Config{}, nodecmd.Options{}, err
	}
	return cfg, flags.Options(), nil
}
