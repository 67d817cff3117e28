// Command tempest-gate runs a Tempest gate: one of the gates (a cluster of
// 1, 3 or 5) that take jobs from clients, elect a leader, and drive each
// job in one or more datacenters under fenced leases (SPEC §8).
//
// Configuration comes from a YAML file (--config) with flags overriding it.
// Secrets come only from the environment: AUTH_SECRET (and, during a
// rotation, AUTH_SECRET_PREVIOUS) for the cluster, TEMPEST_TOKEN for the API.
// Signals: SIGTERM or SIGINT stop the API, give up leadership, leave SWIM
// and exit 0; a second one exits at once. SIGHUP reloads the secrets from
// --secret-file, or from the environment when no file is given.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"tempest/api"
	"tempest/cmd/internal/nodecmd"
	"tempest/gate"
	"tempest/workflow"
)

const shutdownTimeout = 15 * time.Second

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	os.Exit(run(os.Args[1:], os.Getenv, os.Stderr, sigs, nil))
}

// fileConfig is the config file: the gate's options plus the API server's
// TLS files.
type fileConfig struct {
	gate.Config `yaml:",inline"`
	APITLSCert  string `yaml:"api_tls_cert"`
	APITLSKey   string `yaml:"api_tls_key"`
}

type options struct {
	configFile string
	secretFile string
	token      string
	logFormat  string
	logLevel   string
	tlsCert    string
	tlsKey     string
}

// run is main without the process: ready, if not nil, receives the API URL
// once the gate serves.
func run(args []string, getenv func(string) string, stderr io.Writer, sigs <-chan os.Signal, ready chan<- string) int {
	cfg, opts, err := loadConfig(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "tempest-gate: %v\n", err)
		}
		return nodecmd.ExitUsage
	}
	logger, err := nodecmd.NewLogger(opts.logFormat, opts.logLevel, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "tempest-gate: %v\n", err)
		return nodecmd.ExitUsage
	}
	cfg.Logger = logger
	logger = logger.With("node", cfg.ID)

	keyring, err := nodecmd.KeyringFromEnv(getenv)
	if err != nil {
		logger.Error("refusing to start", "err", err)
		return nodecmd.ExitFailure
	}
	token := getenv("TEMPEST_TOKEN")
	if opts.token != "" {
		logger.Warn("API token given on the command line, where any local user can read it; prefer TEMPEST_TOKEN")
		token = opts.token
	}
	if token == "" {
		logger.Error("refusing to start", "err", "TEMPEST_TOKEN is not set: the API needs a bearer token")
		return nodecmd.ExitFailure
	}
	g, err := gate.New(cfg, gate.Deps{Keyring: keyring})
	if err != nil {
		logger.Error("refusing to start", "err", err)
		return nodecmd.ExitFailure
	}
	scfg := api.DefaultServerConfig()
	scfg.Listen = cfg.APIListen
	scfg.Token = token
	scfg.TLSCertFile, scfg.TLSKeyFile = opts.tlsCert, opts.tlsKey
	scfg.Registry = workflow.DefaultRegistry()
	scfg.Logger = logger
	scfg.Role = "gate"
	scfg.Metrics = g
	srv := api.NewServer(scfg, g)
	if err := srv.Start(context.Background()); err != nil {
		logger.Error("refusing to start: API server", "err", err)
		g.Shutdown(context.Background())
		return nodecmd.ExitFailure
	}
	if cfg.APIAdvertise == "" {
		if err := g.SetAPIAddr(srv.URL()); err != nil {
			logger.Warn("could not publish the API address", "err", err)
		}
	}
	logger.Info("gate serving", "api", srv.URL(), "quic", g.Addr(), "swim", g.SwimAddr())
	return nodecmd.Serve(g, srv, "gate", logger, sigs, opts.secretFile, getenv, shutdownTimeout, func() {
		if ready != nil {
			ready <- srv.URL()
		}
	})
}

// loadConfig reads --config, then applies the flags that were given.
func loadConfig(args []string, stderr io.Writer) (gate.Config, options, error) {
	fs := flag.NewFlagSet("tempest-gate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opts options
	fs.StringVar(&opts.configFile, "config", "", "YAML config `file`")
	fs.StringVar(&opts.secretFile, "secret-file", "", "env `file` (KEY=VALUE lines) to reload AUTH_SECRET and AUTH_SECRET_PREVIOUS from on SIGHUP")
	fs.StringVar(&opts.token, "token", "", "API bearer token (prefer the TEMPEST_TOKEN environment variable)")
	fs.StringVar(&opts.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&opts.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	id := fs.String("id", "", "node id (default gate-<hostname>)")
	quic := fs.String("quic", "", "QUIC listen `address` (host:port)")
	swimBind := fs.String("swim", "", "SWIM bind `address` (ip:port) of the gates' cluster")
	apiListen := fs.String("api", "", "API listen `address` (host:port)")
	dataDir := fs.String("data-dir", "", "data `directory` (jobs, leases, election state)")
	peers := fs.String("peers", "", "every gate, this one included: `id=quicaddr,...`")
	join := fs.String("join", "", "comma-separated SWIM seed addresses")
	swimProfile := fs.String("swim-profile", "", "SWIM timing profile: lan, local or test")
	electionProfile := fs.String("election-profile", "", "election timing profile: lan, local or test")
	leaseTTL := fs.Duration("lease-ttl", 0, "how long a datacenter's lease lasts without a progress report")
	if err := fs.Parse(args); err != nil {
		return gate.Config{}, opts, err
	}
	if fs.NArg() > 0 {
		return gate.Config{}, opts, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	fc := fileConfig{Config: gate.DefaultConfig()}
	if opts.configFile != "" {
		if err := nodecmd.ReadConfigFile(opts.configFile, &fc); err != nil {
			return gate.Config{}, opts, err
		}
	}
	cfg := fc.Config
	opts.tlsCert, opts.tlsKey = fc.APITLSCert, fc.APITLSKey
	var perr error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "id":
			cfg.ID = *id
		case "quic":
			cfg.QUICListen = *quic
		case "swim":
			cfg.SwimBind = *swimBind
		case "api":
			cfg.APIListen = *apiListen
		case "data-dir":
			cfg.DataDir = *dataDir
		case "peers":
			cfg.Peers, perr = parsePeers(*peers)
		case "join":
			cfg.Join = nodecmd.SplitList(*join)
		case "swim-profile":
			cfg.SwimProfile = *swimProfile
		case "election-profile":
			cfg.ElectionProfile = *electionProfile
		case "lease-ttl":
			cfg.LeaseTTL = *leaseTTL
		}
	})
	if perr != nil {
		return gate.Config{}, opts, perr
	}
	if cfg.ID == "" {
		host, err := os.Hostname()
		if err != nil {
			return gate.Config{}, opts, fmt.Errorf("no --id and no hostname to derive one: %w", err)
		}
		cfg.ID = "gate-" + host
	}
	if err := cfg.Validate(); err != nil {
		return gate.Config{}, opts, err
	}
	return cfg, opts, nil
}

// parsePeers reads "id=quicaddr,id=quicaddr".
func parsePeers(s string) ([]gate.Peer, error) {
	return nodecmd.ParsePeers(s, func(id, addr string) gate.Peer { return gate.Peer{ID: id, QUIC: addr} })
}
