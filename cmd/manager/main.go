// Command tempest-manager runs a Tempest manager: one of its datacenter's
// managers (a cluster of 1, 3 or 5), which elect a leader that places jobs
// on workers with quorum confirmation, and serve the client API.
//
// Configuration comes from a YAML file (--config) with flags overriding it.
// Secrets come only from the environment: AUTH_SECRET (and, during a
// rotation, AUTH_SECRET_PREVIOUS) for the cluster, TEMPEST_TOKEN for the API
// (--token exists for development, but a command line is visible to every
// user of the machine). Signals: SIGTERM or SIGINT stop the API, give up
// leadership, leave SWIM and exit 0; a second one exits at once. SIGHUP
// reloads the secrets from --secret-file, or from the process environment
// when no file is given, for a key rotation.
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
	"tempest/manager"
	"tempest/workflow"
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
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	os.Exit(run(os.Args[1:], os.Getenv, os.Stderr, sigs, nil))
}

// fileConfig is the config file: the manager's options plus the API
// server's TLS files.
type fileConfig struct {
	manager.Config `yaml:",inline"`
	APITLSCert     string `yaml:"api_tls_cert"`
	APITLSKey      string `yaml:"api_tls_key"`
}

// options are the flags that are not part of manager.Config.
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
// once the manager serves (tests use it).
func run(args []string, getenv func(string) string, stderr io.Writer, sigs <-chan os.Signal, ready chan<- string) int {
	cfg, opts, err := loadConfig(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "tempest-manager: %v\n", err)
		}
		return exitUsage
	}
	logger, err := nodecmd.NewLogger(opts.logFormat, opts.logLevel, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "tempest-manager: %v\n", err)
		return exitUsage
	}
	cfg.Logger = logger
	logger = logger.With("node", cfg.ID)

	keyring, err := nodecmd.KeyringFromEnv(getenv)
	if err != nil {
		logger.Error("refusing to start", "err", err)
		return exitFailure
	}
	token := getenv("TEMPEST_TOKEN")
	if opts.token != "" {
		logger.Warn("API token given on the command line, where any local user can read it; prefer TEMPEST_TOKEN")
		token = opts.token
	}
	if token == "" {
		logger.Error("refusing to start", "err", "TEMPEST_TOKEN is not set: the API needs a bearer token")
		return exitFailure
	}
	reg := workflow.DefaultRegistry()
	m, err := manager.New(cfg, manager.Deps{Keyring: keyring, Registry: reg})
	if err != nil {
		logger.Error("refusing to start", "err", err)
		return exitFailure
	}

	scfg := api.DefaultServerConfig()
	scfg.Listen = cfg.APIListen
	scfg.Token = token
	scfg.TLSCertFile, scfg.TLSKeyFile = opts.tlsCert, opts.tlsKey
	scfg.Registry = reg
	scfg.Logger = logger
	scfg.Role = "manager"
	scfg.Metrics = m
	srv := api.NewServer(scfg, m)
	if err := srv.Start(context.Background()); err != nil {
		logger.Error("refusing to start: API server", "err", err)
		m.Shutdown(context.Background())
		return exitFailure
	}
	if cfg.APIAdvertise == "" {
		if err := m.SetAPIAddr(srv.URL()); err != nil {
			logger.Warn("could not publish the API address", "err", err)
		}
	}
	logger.Info("manager serving", "api", srv.URL(), "quic", m.Addr())

	return nodecmd.Serve(m, srv, "manager", logger, sigs, opts.secretFile, getenv, shutdownTimeout, func() {
		if ready != nil {
			ready <- srv.URL()
		}
	})
}

// loadConfig reads --config, then applies the flags that were given.
func loadConfig(args []string, stderr io.Writer) (manager.Config, options, error) {
	fs := flag.NewFlagSet("tempest-manager", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opts options
	fs.StringVar(&opts.configFile, "config", "", "YAML config `file`")
	fs.StringVar(&opts.secretFile, "secret-file", "", "env `file` (KEY=VALUE lines) to reload AUTH_SECRET and AUTH_SECRET_PREVIOUS from on SIGHUP")
	fs.StringVar(&opts.token, "token", "", "API bearer token (prefer the TEMPEST_TOKEN environment variable)")
	fs.StringVar(&opts.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&opts.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	id := fs.String("id", "", "node id (default manager-<hostname>)")
	dc := fs.String("dc", "", "datacenter")
	quic := fs.String("quic", "", "QUIC listen `address` (host:port)")
	swimBind := fs.String("swim", "", "SWIM bind `address` (ip:port)")
	apiListen := fs.String("api", "", "API listen `address` (host:port)")
	dataDir := fs.String("data-dir", "", "data `directory` (jobs, election state)")
	peers := fs.String("peers", "", "every manager of the datacenter, this one included: `id=quicaddr,...`")
	join := fs.String("join", "", "comma-separated SWIM seed addresses")
	swimProfile := fs.String("swim-profile", "", "SWIM timing profile: lan, local or test")
	electionProfile := fs.String("election-profile", "", "election timing profile: lan, local or test")
	if err := fs.Parse(args); err != nil {
		return manager.Config{}, opts, err
	}
	if fs.NArg() > 0 {
		return manager.Config{}, opts, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}

	fc := fileConfig{Config: manager.DefaultConfig()}
	if opts.configFile != "" {
		if err := nodecmd.ReadConfigFile(opts.configFile, &fc); err != nil {
			return manager.Config{}, opts, err
		}
	}
	cfg := fc.Config
	opts.tlsCert, opts.tlsKey = fc.APITLSCert, fc.APITLSKey
	var perr error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "id":
			cfg.ID = *id
		case "dc":
			cfg.Datacenter = *dc
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
		}
	})
	if perr != nil {
		return manager.Config{}, opts, perr
	}
	if cfg.ID == "" {
		host, err := os.Hostname()
		if err != nil {
			return manager.Config{}, opts, fmt.Errorf("no --id and no hostname to derive one: %w", err)
		}
		cfg.ID = "manager-" + host
	}
	if err := cfg.Validate(); err != nil {
		return manager.Config{}, opts, err
	}
	return cfg, opts, nil
}

// parsePeers reads "id=quicaddr,id=quicaddr".
func parsePeers(s string) ([]manager.Peer, error) {
	return nodecmd.ParsePeers(s, func(id, addr string) manager.Peer { return manager.Peer{ID: id, QUIC: addr} })
}
