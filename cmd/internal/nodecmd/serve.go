package nodecmd

import (
	"context"
	"log/slog"
	"os"
	"syscall"
	"time"
)

// Exit codes of the node binaries.
const (
	ExitOK      = 0
	ExitFailure = 1 // could not start (weak secret, port in use) or stopped uncleanly
	ExitUsage   = 2 // bad flags or config file
)

// Role is a node role as the serve loop drives it: the manager and the gate.
type Role interface {
	Run(ctx context.Context) error
	Shutdown(ctx context.Context) error
	ReloadSecrets(current, previous string) error
}

// HandingOver is a role that, asked to stop while it leads its group, can
// first hand its leadership to a peer (the gate and the manager). Serve
// calls it before it ends the role's Run: the election stops with Run.
type HandingOver interface {
	HandOff(ctx context.Context)
}

// Front is what stands in front of a role and stops first: its API server.
type Front interface {
	Shutdown(ctx context.Context) error
}

// Serve runs role until a signal stops it: SIGTERM or SIGINT hand a
// leading role's leadership over (HandingOver), shut the front down (so no
// new request reaches a node going away), then the role, within timeout; a second one exits at once. SIGHUP reloads the secrets from
// secretFile (or the environment) and keeps the current ones on error.
// ready, if not nil, runs once the role is running. It returns the exit
// code.
func Serve(role Role, front Front, name string, logger *slog.Logger, sigs <-chan os.Signal,
	secretFile string, getenv func(string) string, timeout time.Duration, ready func()) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- role.Run(ctx) }()
	if ready != nil {
		ready()
	}
	shutdown := func() int {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		code := ExitOK
		if front != nil {
			if err := front.Shutdown(ctx); err != nil {
				logger.Warn("API shutdown", "err", err)
				code = ExitFailure
			}
		}
		if err := role.Shutdown(ctx); err != nil {
			logger.Warn(name+" shutdown", "err", err)
			code = ExitFailure
		}
		logger.Info(name + " stopped")
		return code
	}

	stopped := make(chan int, 1)
	stopping := false
	for {
		select {
		case err := <-runDone:
			// Run only returns early if it could not run at all.
			if err != nil {
				logger.Error(name+" failed", "err", err)
			}
			if !stopping {
				shutdown()
				return ExitFailure
			}
			runDone = nil
		case code := <-stopped:
			return code
		case sig := <-sigs:
			switch {
			case sig == syscall.SIGHUP:
				Reload(role, secretFile, getenv, logger)
			case !stopping:
				stopping = true
				logger.Info("signal received: shutting down", "signal", sig.String())
				go func() {
					if h, ok := role.(HandingOver); ok {
						hctx, hcancel := context.WithTimeout(context.Background(), timeout)
						h.HandOff(hctx)
						hcancel()
					}
					cancel()
					stopped <- shutdown()
				}()
			default:
				logger.Warn("second signal: exiting now", "signal", sig.String())
				return ExitFailure
			}
		}
	}
}

// Reload is a SIGHUP: it re-reads the secrets (Secrets) and hands them to
// the node, which keeps its current ones, as logged, when either fails.
func Reload(node interface {
	ReloadSecrets(current, previous string) error
}, secretFile string, getenv func(string) string, logger *slog.Logger) {
	current, previous, err := Secrets(secretFile, getenv)
	if err == nil {
		err = node.ReloadSecrets(current, previous)
	}
	if err != nil {
		logger.Error("secret reload failed; keeping the current secrets", "err", err)
	}
}
