// Command tempest-worker runs a Tempest worker: it registers with its
// datacenter's managers, joins their SWIM cluster and runs the workflows they
// dispatch.
//
// Configuration comes from a YAML file (--config) with flags overriding it;
// secrets from the environment (AUTH_SECRET, AUTH_SECRET_PREVIOUS) or, over
// it, from --secret-file, read at start-up as well as on SIGHUP.
// Signals: SIGTERM or SIGINT drains (no new work, running work finishes or is
// handed back, final progress delivered, SWIM left) and exits 0; a second one
// stops at once. SIGHUP reloads the secrets from --secret-file, or from the
// process environment when no file is given, for a key rotation.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"tempest/cmd/internal/nodecmd"
	"tempest/internal/obs"
	"tempest/rainstorm"
	"tempest/worker"
)

// Exit codes: those of every node binary.
const (
	exitOK      = nodecmd.ExitOK
	exitFailure = nodecmd.ExitFailure
	exitUsage   = nodecmd.ExitUsage
)

// drainGrace is added to twice the drain timeout (running work, then final
// progress) to bound the whole drain, leaving time to leave SWIM.
const drainGrace = 5 * time.Second

func main() {
	// The worker binary is also its exec programs' shim: it sets their
	// limits on itself and becomes the program (rainstorm.ExecShimMain).
	if len(os.Args) > 1 && os.Args[1] == rainstorm.ExecShimArg {
		os.Exit(rainstorm.ExecShimMain(os.Args[2:]))
	}
	os.Exit(run(os.Args[1:], nodecmd.TakeSecrets(), os.Stderr, nodecmd.Signals()))
}

func run(args []string, getenv func(string) string, stderr io.Writer, sigs <-chan os.Signal) int {
	cfg, opts, err := loadConfig(args, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case err != nil:
		fmt.Fprintf(stderr, "tempest-worker: %v\n", err)
		return exitUsage
	}
	if err := checkExecHost(cfg, opts.SecretFile, os.Geteuid()); err != nil {
		fmt.Fprintf(stderr, "tempest-worker: %v\n", err)
		return exitUsage
	}
	node, code, err := nodecmd.PrepareNode("tempest-worker", cfg.ID, opts, getenv, stderr)
	if err != nil {
		return code
	}
	cfg.Logger = node.Base // the worker and its layers add the node id themselves
	logger := node.Log
	nodecmd.LimitMemory(cfg.MemoryLimit, getenv, logger)
	deps := worker.Deps{Keyring: node.Keyring, Registry: rainstorm.Registry(rainstorm.ParseOptions{})}
	if cfg.Exec.Enabled {
		if exe, err := os.Executable(); err == nil {
			deps.ExecShim = []string{exe, rainstorm.ExecShimArg}
		}
		// Programs of the worker's user must not read its memory or its
		// start-up environment through /proc (the secrets are gone from
		// the environment it passes on, not from the one the kernel kept).
		if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
			logger.Warn("exec: could not make the worker undumpable", "err", err)
		}
	}
	w, err := worker.New(cfg, deps)
	if err != nil {
		logger.Error("refusing to start", "err", err)
		return exitFailure
	}

	if cfg.MetricsListen != "" {
		// The node's own registry, served on its own port: a worker has
		// no API server. TEMPEST_METRICS_TOKEN protects it as on the API.
		reg := obs.NewRegistry()
		if err := w.RegisterMetrics(reg); err != nil {
			logger.Error("refusing to start", "err", err)
			return exitFailure
		}
		token := node.Getenv("TEMPEST_METRICS_TOKEN")
		ms, err := obs.Listen(context.Background(), cfg.MetricsListen, reg, token, obs.ServeJobSeries(token, cfg.MetricsJobSeries), logger)
		if err != nil {
			logger.Error("refusing to start", "err", err)
			return exitFailure
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := ms.Shutdown(ctx); err != nil {
				logger.Warn("metrics server shutdown", "err", err)
			}
		}()
		logger.Info("serving metrics", "addr", "http://"+ms.Addr()+"/metrics")
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(ctx) }()

	code = exitOK
	draining := false
	for {
		select {
		case err := <-runErr:
			if err != nil {
				logger.Error("worker failed", "err", err)
				return exitFailure
			}
			return code
		case sig := <-sigs:
			switch {
			case sig == syscall.SIGHUP:
				nodecmd.Reload(w, opts.SecretFile, getenv, logger)
			case !draining:
				draining = true
				logger.Info("signal received: draining", "signal", sig.String())
				go drain(w, cfg.DrainTimeout, cancel, logger)
			default:
				logger.Warn("second signal: stopping now", "signal", sig.String())
				code = exitFailure
				cancel()
			}
		}
	}
}

// drain runs the worker's graceful shutdown; Run returns when it is done.
// A worker still starting up cannot drain, so it is stopped outright.
func drain(w *worker.Worker, timeout time.Duration, stop context.CancelFunc, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*timeout+drainGrace)
	defer cancel()
	err := w.Drain(ctx)
	switch {
	case errors.Is(err, worker.ErrNotRunning), errors.Is(err, worker.ErrStopped):
		stop()
	case err != nil:
		logger.Warn("drain incomplete", "err", err)
		stop() // Drain gave up waiting; make sure Run returns
	}
}

// loadConfig reads --config, then applies the flags that were given.
func loadConfig(args []string, stderr io.Writer) (worker.Config, nodecmd.Options, error) {
	fs := flag.NewFlagSet("tempest-worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	flags := nodecmd.NewNodeFlags(fs, "worker")
	dc := fs.String("dc", "", "datacenter")
	managers := fs.String("managers", "", "comma-separated manager QUIC addresses")
	cores := fs.Int("cores", 0, "cores to offer (default: all)")
	metricsListen := fs.String("metrics-listen", "", "serve Prometheus /metrics at this TCP `address` (host:port); default none")
	if err := flags.Parse(args); err != nil {
		return worker.Config{}, nodecmd.Options{}, err
	}
	cfg := worker.DefaultConfig()
	if err := flags.ReadConfig(&cfg, nil); err != nil {
		return worker.Config{}, nodecmd.Options{}, err
	}
	if err := flags.ApplyNode(&cfg.Node); err != nil {
		return worker.Config{}, nodecmd.Options{}, err
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "dc":
			cfg.Datacenter = *dc
		case "managers":
			cfg.Managers = nodecmd.SplitList(*managers)
		case "cores":
			cfg.Cores = *cores
		case "metrics-listen":
			cfg.MetricsListen = *metricsListen
		}
	})
	if err := cfg.Validate(); err != nil {
		return worker.Config{}, nodecmd.Options{}, err
	}
	return cfg, flags.Options(), nil
}

// checkExecHost refuses a worker that would hand its exec programs more
// than the job needs: programs running as root (exec enabled, the worker
// root, no exec.user), or a secret file they could read (group or other
// permissions, or another owner than the worker's user).
func checkExecHost(cfg worker.Config, secretFile string, euid int) error {
	if err := cfg.Exec.CheckRunAs(euid); err != nil {
		return err
	}
	if cfg.Exec.Enabled && secretFile != "" {
		if err := nodecmd.CheckPrivateFile(secretFile, euid); err != nil {
			return fmt.Errorf("exec.enabled: %w", err)
		}
	}
	return nil
}
