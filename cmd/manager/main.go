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
	"tempest/manager"
	"tempest/rainstorm"
)

// Exit codes.
const (
	exitFailure = nodecmd.ExitFailure
	exitUsage   = nodecmd.ExitUsage
)

// shutdownTimeout bounds the graceful part of a shutdown: API requests in
// flight, then the manager's own work and SWIM leave.
const shutdownTimeout = 15 * time.Second

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stderr, nodecmd.Signals(), nil))
}

// fileConfig is the config file: the manager's options plus the API
// server's TLS files.
type fileConfig struct {
	manager.Config   `yaml:",inline"`
	nodecmd.TLSFiles `yaml:",inline"`
}

// run is main without the process: ready, if not nil, receives the API URL
// once the manager serves (tests use it).
func run(args []string, getenv func(string) string, stderr io.Writer, sigs <-chan os.Signal, ready chan<- string) int {
	start := func(cfg manager.Config, node nodecmd.Node) (nodecmd.Started, error) {
		cfg.Logger = node.Base
		m, err := manager.New(cfg, manager.Deps{Keyring: node.Keyring, Registry: rainstorm.Registry(rainstorm.ParseOptions{})})
		if err != nil {
			return nodecmd.Started{}, err
		}
		return nodecmd.Started{Role: m, APIListen: cfg.APIListen, Advertised: cfg.APIAdvertise != "",
			Attrs: []any{"quic", m.Addr()}}, nil
	}
	p := nodecmd.Process{Getenv: getenv, Stderr: stderr, Sigs: sigs, Ready: ready}
	return nodecmd.Main("tempest-manager", "manager", args, p, shutdownTimeout, loadConfig, func(c manager.Config) string { return c.ID }, start)
}

// loadConfig reads --config, then applies the flags that were given.
func loadConfig(args []string, stderr io.Writer) (manager.Config, nodecmd.Options, error) {
	fs := flag.NewFlagSet("tempest-manager", flag.ContinueOnError)
	fs.SetOutput(stderr)
	flags := nodecmd.NewFlags(fs, "manager")
	dc := fs.String("dc", "", "datacenter")
	if err := flags.Parse(args); err != nil {
		return manager.Config{}, nodecmd.Options{}, err
	}
	fc := fileConfig{Config: manager.DefaultConfig()}
	if err := flags.ReadConfig(&fc, &fc.TLSFiles); err != nil {
		return manager.Config{}, nodecmd.Options{}, err
	}
	cfg := fc.Config
	if err := flags.Apply(nodecmd.Fields{ID: &cfg.ID, QUICListen: &cfg.QUICListen, SwimBind: &cfg.SwimBind,
		APIListen: &cfg.APIListen, DataDir: &cfg.DataDir, SwimProfile: &cfg.SwimProfile,
		ElectionProfile: &cfg.ElectionProfile, Join: &cfg.Join, Peers: &cfg.Peers}, "manager"); err != nil {
		return manager.Config{}, nodecmd.Options{}, err
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "dc" {
			cfg.Datacenter = *dc
		}
	})
	if err := cfg.Validate(); err != nil {
		return manager.Config{}, nodecmd.Options{}, err
	}
	return cfg, flags.Options(), nil
}
