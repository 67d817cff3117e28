package nodecmd

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
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

// Started is an API role that started and where its API listens.
type Started struct {
	Role      APIRole
	APIListen string
	// Advertised: the config names the API URL itself, so the bound
	// address is not published.
	Advertised bool
	// Attrs are logged with the serving line: the role's own addresses.
	Attrs []any
}

// Main is a gate's or manager's binary: load reads the flags and config
// file (flag.ErrHelp when usage was asked for) into a config C whose node
// id is id(C), start builds the role from it on the prepared node, and the API
// serves in front of the role until a signal stops both. It returns the
// exit code.
func Main[C any](binary, role string, args []string, p Process, shutdown time.Duration,
	load func(args []string, stderr io.Writer) (C, Options, error), id func(C) string,
	start func(C, Node) (Started, error)) int {
	cfg, opts, err := load(args, p.Stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(p.Stderr, "%s: %v\n", binary, err)
		}
		return ExitUsage
	}
	node, code, err := Prepare(binary, id(cfg), opts, p.Getenv, p.Stderr)
	if err != nil {
		return code
	}
	s, err := start(cfg, node)
	if err != nil {
		node.Log.Error("refusing to start", "err", err)
		return ExitFailure
	}
	return ServeAPI(s.Role, role, node, opts, s.APIListen, s.Advertised, p.Sigs, p.Getenv, shutdown, p.Ready, s.Attrs...)
}
