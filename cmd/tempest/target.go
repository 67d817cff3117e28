package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"tempest/internal/target"
)

// targetShutdownTimeout is how long in-flight requests get to finish after
// SIGINT/SIGTERM before their waits are cut short.
const targetShutdownTimeout = 10 * time.Second

// runTarget serves the built-in HTTP target until ctx is cancelled, then
// shuts down gracefully and prints the final counts as one JSON line, which
// a script can compare with its own count of responses.
func runTarget(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	def := target.DefaultConfig()
	fs := flag.NewFlagSet("target", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: tempest target [flags]

Serve a fast HTTP target for tests and demos. Any path answers "ok" (or 500
at --error-rate); /status/{code} answers that code, /delay/{ms} waits then
answers 200. GET /__stats reports the answered-request counts as JSON;
POST /__reset zeroes them.

flags:
`)
		fs.PrintDefaults()
	}
	addr := fs.String("addr", def.Addr, "listen address `host:port`")
	latency := fs.Duration("latency", 0, "added to every answer")
	jitter := fs.Duration("jitter", 0, "further uniform random delay in [0, jitter)")
	errorRate := fs.Float64("error-rate", 0, "fraction of requests answered 500, `0..1`")
	bodySize := fs.Int("body-size", def.BodySize, "response body `bytes`")
	seed := fs.Uint64("seed", def.Seed, "seed for error and jitter choices")
	useTLS := fs.Bool("tls", false, "serve HTTPS (HTTP/1.1) with a self-signed certificate made at start")
	certOut := fs.String("cert-out", "", "with --tls, write the certificate (PEM) to this `file`, for clients to trust")
	verbose := fs.Bool("v", false, "log start and stop to stderr")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tempest target: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}

	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	cfg := target.Config{
		Addr:      *addr,
		Latency:   *latency,
		Jitter:    *jitter,
		ErrorRate: *errorRate,
		BodySize:  *bodySize,
		Seed:      *seed,
		TLS:       *useTLS,
		Logger:    slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
	}
	srv, err := target.New(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "tempest target: %v\n", err)
		return exitUsage
	}
	if *certOut != "" {
		if !*useTLS {
			fmt.Fprintln(stderr, "tempest target: --cert-out needs --tls")
			return exitUsage
		}
		if err := os.WriteFile(*certOut, srv.CertificatePEM(), 0o644); err != nil {
			fmt.Fprintf(stderr, "tempest target: %v\n", err)
			return exitUsage
		}
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.Addr)
	if err != nil {
		fmt.Fprintf(stderr, "tempest target: %v\n", err)
		return exitUsage
	}

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	// ln, not srv.Addr(): Serve may not have taken the listener yet.
	scheme := "http"
	if *useTLS {
		scheme = "https"
	}
	fmt.Fprintf(stdout, "target listening on %s://%s\n", scheme, ln.Addr())

	code := exitOK
	select {
	case <-ctx.Done():
	case err := <-served:
		// Serve only returns on its own when accepting fails for good.
		fmt.Fprintf(stderr, "tempest target: serve: %v\n", err)
		code = exitUsage
		served = nil
	}
	sctx, cancel := context.WithTimeout(context.Background(), targetShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		fmt.Fprintf(stderr, "tempest target: shutdown: %v (requests still waiting were dropped)\n", err)
	}
	if served != nil {
		<-served
	}

	line, err := json.Marshal(srv.Stats())
	if err != nil {
		fmt.Fprintf(stderr, "tempest target: stats: %v\n", err)
		return exitUsage
	}
	fmt.Fprintf(stdout, "%s\n", line)
	return code
}
