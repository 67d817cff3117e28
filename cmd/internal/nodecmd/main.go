package nodecmd

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"tempest/internal/nodeconfig"
	"time"
)

// Signals returns the channel a node binary's main hands to its run:
// SIGTERM and SIGINT stop the node, SIGHUP reloads its secrets (Serve).
func Signals() <-chan os.Signal {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	return sigs
}

// Process is what a node binary's run gets from its process, so tests can
// run it in-process: the environment, stderr, signals and, if not nil, a
// channel that receives the API URL once the node serves.
type Process struct {
	Getenv func(string) string
	Stderr io.Writer
	Sigs   <-chan os.Signal
	Ready  chan<- string
}

// Started is an API role that started.
type Started struct {
	Role APIRole
	// Attrs are logged with the serving line: the role's own addresses.
	Attrs []any
}

// Binary is a gate's or manager's binary: what Load and Main need to know
// of its role.
type Binary[C interface{ Validate() error }] struct {
	// Name is the binary's ("tempest-gate"), Role the role's ("gate"):
	// the default node id's prefix and the word logs and checks use.
	Name, Role string
	// Defaults is the config before the file and the flags.
	Defaults func() C
	// Server is the config's nodeconfig.Server, which the shared flags set.
	Server func(*C) *nodeconfig.Server
	// Flags, if not nil, registers the role's own flags on fs and returns
	// what sets the config from those that were given (Given).
	Flags func(fs *flag.FlagSet) func(*C)
	// Start builds the role from the config on the prepared node.
	Start func(C, Node) (Started, error)
	// Shutdown bounds the graceful part of a shutdown.
	Shutdown time.Duration
}

// fileConfig is a config file: the role's keys and the API server's TLS
// files, side by side.
type fileConfig[C any] struct {
	Config   C `yaml:",inline"`
	TLSFiles `yaml:",inline"`
}

// Load reads the flags, then the --config file over the defaults, then
// applies the flags that were given over the file, and validates.
func (b Binary[C]) Load(args []string, stderr io.Writer) (C, Options, error) {
	var zero C
	fs := flag.NewFlagSet(b.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	flags := NewFlags(fs, b.Role)
	own := func(*C) {}
	if b.Flags != nil {
		own = b.Flags(fs)
	}
	if err := flags.Parse(args); err != nil {
		return zero, Options{}, err
	}
	fc := fileConfig[C]{Config: b.Defaults()}
	if err := flags.ReadConfig(&fc, &fc.TLSFiles); err != nil {
		return zero, Options{}, err
	}
	cfg := fc.Config
	if err := flags.Apply(b.Server(&cfg)); err != nil {
		return zero, Options{}, err
	}
	own(&cfg)
	if err := cfg.Validate(); err != nil {
		return zero, Options{}, err
	}
	opts := flags.Options()
	if err := CheckPlainAPI(*b.Server(&cfg), opts.TLSCert != ""); err != nil {
		return zero, Options{}, err
	}
	return cfg, opts, nil
}

// CheckPlainAPI refuses an API that would serve plain HTTP on an address
// other than loopback: every request carries the bearer token, which would
// cross the network in clear. api_insecure_http says the operator knows
// (a TLS proxy in front, a private network).
func CheckPlainAPI(s nodeconfig.Server, tls bool) error {
	if tls || s.APIInsecureHTTP || s.APIListen == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(s.APIListen)
	if err != nil {
		return nil // Validate named it
	}
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		return nil
	}
	return fmt.Errorf("api_listen %q is not a loopback address and the API has no TLS (api_tls_cert, api_tls_key): "+
		"bearer tokens would cross the network in clear; configure TLS, or set api_insecure_http: true to serve plain HTTP anyway", s.APIListen)
}

// Given reports whether the flag name was set on fs's command line.
func Given(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// Main runs the binary: it loads the config (exit 2 on a bad one; usage
// asked for prints it), prepares the node, starts the role and serves the
// API in front of it until a signal stops both. It returns the exit code.
func (b Binary[C]) Main(args []string, p Process) int {
	cfg, opts, err := b.Load(args, p.Stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(p.Stderr, "%s: %v\n", b.Name, err)
		}
		return ExitUsage
	}
	node, code, err := Prepare(b.Name, b.Server(&cfg).ID, opts, p.Getenv, p.Stderr)
	if err != nil {
		return code
	}
	b.Server(&cfg).Logger = node.Base
	LimitMemory(b.Server(&cfg).MemoryLimit, p.Getenv, node.Log)
	s, err := b.Start(cfg, node)
	if err != nil {
		node.Log.Error("refusing to start", "err", err)
		return ExitFailure
	}
	return ServeAPI(s.Role, b.Role, node, opts, *b.Server(&cfg), p.Sigs, p.Getenv, b.Shutdown, p.Ready, s.Attrs...)
}
