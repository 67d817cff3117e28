package nodecmd

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tempest/api"
	"tempest/internal/nodeconfig"
	"tempest/internal/obs"
	"tempest/leadership"
	"tempest/rainstorm"
	"tempest/security"
)

// Options are the flags of a node binary that are not part of its role's
// config, and the API server's TLS files from its config file.
type Options struct {
	ConfigFile, SecretFile, Token, LogFormat, LogLevel string
	TLSCert, TLSKey, TLSClientCA                       string
}

// Flags are the flags every node binary has (NewNodeFlags), and those of a
// gate and a manager (NewFlags); the role's own ones are added to the same
// FlagSet by its binary.
type Flags struct {
	fs   *flag.FlagSet
	role string
	opts Options
	vals map[string]*string
}

// NewNodeFlags registers the flags every node binary has on fs for role
// ("worker", "gate", "manager"): its config and secret files, logging, and
// the nodeconfig.Node fields.
func NewNodeFlags(fs *flag.FlagSet, role string) *Flags {
	f := &Flags{fs: fs, role: role, vals: map[string]*string{}}
	fs.StringVar(&f.opts.ConfigFile, "config", "", "YAML config `file`")
	fs.StringVar(&f.opts.SecretFile, "secret-file", "", "env `file` (KEY=VALUE lines) with AUTH_SECRET and AUTH_SECRET_PREVIOUS (and, on a node with an API, TEMPEST_TOKEN), read at start-up (over the environment) and on SIGHUP")
	fs.StringVar(&f.opts.LogFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&f.opts.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.strings(
		"id", "node id (default "+role+"-<hostname>)",
		"quic", "QUIC listen `address` (host:port)",
		"swim", "SWIM bind `address` (ip:port)",
		"join", "comma-separated SWIM seed addresses",
		"swim-profile", "SWIM timing profile: lan, fastlan, local or test")
	return f
}

// NewFlags registers a gate's or manager's shared flags on fs: the node's,
// the API token and the nodeconfig.Server fields.
func NewFlags(fs *flag.FlagSet, role string) *Flags {
	f := NewNodeFlags(fs, role)
	fs.StringVar(&f.opts.Token, "token", "", "API bearer token (prefer the TEMPEST_TOKEN environment variable)")
	f.strings(
		"api", "API listen `address` (host:port)",
		"data-dir", "data `directory`",
		"peers", "every "+role+" of the election group, this one included: `id=quicaddr,...`",
		"election-profile", "election timing profile: lan, local or test")
	return f
}

// strings registers string flags from name, usage pairs.
func (f *Flags) strings(nameUsage ...string) {
	for i := 0; i+1 < len(nameUsage); i += 2 {
		f.vals[nameUsage[i]] = f.fs.String(nameUsage[i], "", nameUsage[i+1])
	}
}

// Parse parses args and refuses stray arguments.
func (f *Flags) Parse(args []string) error {
	if err := f.fs.Parse(args); err != nil {
		return err
	}
	if f.fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", f.fs.Args())
	}
	return nil
}

// Options returns the parsed options.
func (f *Flags) Options() Options { return f.opts }

// ApplyNode sets dst's fields from the node flags that were given, leaving
// the config file's values for the rest, and derives ID from the host name
// when neither set it.
func (f *Flags) ApplyNode(dst *nodeconfig.Node) error {
	return f.apply(dst, nil)
}

// Apply is ApplyNode for a gate's or manager's nodeconfig.Server.
func (f *Flags) Apply(dst *nodeconfig.Server) error {
	return f.apply(&dst.Node, dst)
}

func (f *Flags) apply(node *nodeconfig.Node, srv *nodeconfig.Server) error {
	var err error
	str := map[string]*string{"id": &node.ID, "quic": &node.QUICListen, "swim": &node.SwimBind, "swim-profile": &node.SwimProfile}
	if srv != nil {
		str["api"], str["data-dir"], str["election-profile"] = &srv.APIListen, &srv.DataDir, &srv.ElectionProfile
	}
	f.fs.Visit(func(fl *flag.Flag) {
		v, ok := f.vals[fl.Name]
		if !ok {
			return
		}
		switch fl.Name {
		case "peers":
			srv.Peers, err = ParsePeers(*v, func(id, addr string) leadership.Member { return leadership.Member{ID: id, QUIC: addr} })
		case "join":
			node.Join = SplitList(*v)
		default:
			*str[fl.Name] = *v
		}
	})
	if err != nil {
		return err
	}
	if node.ID == "" {
		host, herr := os.Hostname()
		if herr != nil {
			return fmt.Errorf("no --id and no hostname to derive one: %w", herr)
		}
		node.ID = f.role + "-" + host
	}
	return nil
}

// Node is what a node binary sets up before it builds its role: loggers,
// the cluster keyring, its start-up environment and, with an API, the API
// token.
type Node struct {
	Base    *slog.Logger // for the role's own config (it adds its attributes)
	Log     *slog.Logger // the binary's own lines, with the node id
	Keyring *security.Keyring
	// Getenv is the start-up environment (StartupEnv).
	Getenv func(string) string
	Token  string
}

// PrepareNode builds the loggers and reads the secrets, refusing a weak or
// missing AUTH_SECRET. On failure it has written why (to stderr or the log)
// and returns the exit code.
func PrepareNode(name, id string, opts Options, getenv func(string) string, stderr io.Writer) (Node, int, error) {
	base, err := NewLogger(opts.LogFormat, opts.LogLevel, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return Node{}, ExitUsage, err
	}
	n := Node{Base: base, Log: base.With("node", id)}
	if n.Getenv, err = StartupEnv(opts.SecretFile, getenv); err != nil {
		n.Log.Error("refusing to start", "err", err)
		return n, ExitFailure, err
	}
	if n.Keyring, err = KeyringFromEnv(n.Getenv); err != nil {
		n.Log.Error("refusing to start", "err", err)
		return n, ExitFailure, err
	}
	return n, ExitOK, nil
}

// Prepare is PrepareNode for a node with an API, which also refuses to
// start without an API token.
func Prepare(name, id string, opts Options, getenv func(string) string, stderr io.Writer) (Node, int, error) {
	n, code, err := PrepareNode(name, id, opts, getenv, stderr)
	if err != nil {
		return n, code, err
	}
	n.Token = n.Getenv("TEMPEST_TOKEN")
	if opts.Token != "" {
		n.Log.Warn("API token given on the command line, where any local user can read it; prefer TEMPEST_TOKEN")
		n.Token = opts.Token
	}
	if n.Token == "" {
		err := errors.New("TEMPEST_TOKEN is not set: the API needs a bearer token")
		n.Log.Error("refusing to start", "err", err)
		return n, ExitFailure, err
	}
	return n, ExitOK, nil
}

// TLSFiles are the API server's certificate and key, in a node's config
// file beside its role's own keys (embed it inline).
type TLSFiles struct {
	APITLSCert string `yaml:"api_tls_cert"`
	APITLSKey  string `yaml:"api_tls_key"`
	// APITLSClientCA, with TLS, requires every API client to present a
	// certificate this PEM file's CAs signed (mutual TLS).
	APITLSClientCA string `yaml:"api_tls_client_ca"`
}

// ReadConfig reads the --config file, if one was given, over file (the
// role's defaults, with TLSFiles inline on a node with an API), and keeps
// its TLS files (tls nil: the node has none).
func (f *Flags) ReadConfig(file any, tls *TLSFiles) error {
	if f.opts.ConfigFile != "" {
		if err := ReadConfigFile(f.opts.ConfigFile, file); err != nil {
			return err
		}
	}
	if tls != nil {
		f.opts.TLSCert, f.opts.TLSKey, f.opts.TLSClientCA = tls.APITLSCert, tls.APITLSKey, tls.APITLSClientCA
	}
	return nil
}

// APIRole is a role that serves the client API: it runs, answers the API
// as its backend, adds its metrics, and publishes the API's URL once the
// server has bound.
type APIRole interface {
	Role
	api.Backend
	// RegisterMetrics registers the role's series in the node's registry.
	RegisterMetrics(reg prometheus.Registerer) error
	SetAPIAddr(url string) error
}

// ServeAPI starts the API server in front of role, publishes its URL unless
// the config advertises one, and serves until a signal stops both (Serve).
// ready, if not nil, receives the API URL once serving. It returns the exit
// code; a server that cannot start shuts the role down.
func ServeAPI(role APIRole, name string, node Node, opts Options, server nodeconfig.Server,
	sigs <-chan os.Signal, getenv func(string) string, timeout time.Duration, ready chan<- string, attrs ...any) int {
	scfg := api.DefaultServerConfig()
	scfg.Listen = server.APIListen
	if server.APIRateLimit > 0 {
		scfg.RateLimit = server.APIRateLimit
	}
	if server.APIRateBurst > 0 {
		scfg.RateBurst = server.APIRateBurst
	}
	scfg.Token = node.Token
	scfg.TLSCertFile, scfg.TLSKeyFile, scfg.TLSClientCAFile = opts.TLSCert, opts.TLSKey, opts.TLSClientCA
	// A role that knows what its workers allow (a manager) checks a
	// pipeline against it while the job file is read, so a refusal names
	// the line.
	var parse rainstorm.ParseOptions
	if r, ok := role.(interface{ RainstormParseOptions() rainstorm.ParseOptions }); ok {
		parse = r.RainstormParseOptions()
	}
	scfg.Registry = rainstorm.Registry(parse)
	scfg.Logger = node.Log
	scfg.Role = name
	// One registry per node, passed in: the runtime and process
	// collectors, the role's series and the API's, served at /metrics.
	scfg.Metrics = obs.NewRegistry()
	if err := role.RegisterMetrics(scfg.Metrics); err != nil {
		node.Log.Error("refusing to start: metrics", "err", err)
		role.Shutdown(context.Background())
		return ExitFailure
	}
	// Followers vouch for their clients' addresses to the leader with the
	// cluster secret; /metrics takes its own token when one is set.
	scfg.Keyring = node.Keyring
	scfg.MetricsToken = getenv("TEMPEST_METRICS_TOKEN")
	scfg.MetricsJobSeries = server.MetricsJobSeries
	scfg.MaxParsing = cmp.Or(server.APIMaxParsing, api.DefaultMaxParsing)
	srv := api.NewServer(scfg, role)
	if err := srv.Start(context.Background()); err != nil {
		node.Log.Error("refusing to start: API server", "err", err)
		role.Shutdown(context.Background())
		return ExitFailure
	}
	if server.APIAdvertise == "" {
		if err := role.SetAPIAddr(srv.URL()); err != nil {
			node.Log.Warn("could not publish the API address", "err", err)
		}
	}
	node.Log.Info(name+" serving", append([]any{"api", srv.URL()}, attrs...)...)
	return Serve(role, srv, name, node.Log, sigs, opts.SecretFile, getenv, timeout, func() {
		if ready != nil {
			ready <- srv.URL()
		}
	})
}
