// Command tempest is Tempest's client CLI: job commands against a cluster's
// API (TEMPEST_API / TEMPEST_TOKEN or --api / --token), plus `dev` (a local
// cluster of real processes), `demo`, `target` and `secret generate`.
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

	"tempest/security"
)

// Exit codes (README): 3 is usage or connection error.
const (
	exitOK    = 0
	exitUsage = 3
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first Ctrl-C ends ctx (a followed job is then cancelled and its
	// summary awaited); the default handling is back for a second one, so
	// a person who will not wait can always quit.
	go func() {
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "submit":
		return runSubmit(ctx, args[1:], stdout, stderr)
	case "blob":
		return runBlob(ctx, args[1:], stdout, stderr)
	case "status":
		return runStatus(ctx, args[1:], stdout, stderr)
	case "watch":
		return runWatch(ctx, args[1:], stdout, stderr)
	case "cancel":
		return runCancel(ctx, args[1:], stdout, stderr)
	case "results":
		return runResults(ctx, args[1:], stdout, stderr)
	case "jobs":
		return runJobs(ctx, args[1:], stdout, stderr)
	case "cluster":
		return runCluster(ctx, args[1:], stdout, stderr)
	case "members":
		return runMembers(ctx, args[1:], stdout, stderr)
	case "demo":
		return runDemo(ctx, args[1:], stdout, stderr)
	case "secret":
		return runSecret(args[1:], stdout, stderr)
	case "dev":
		return runDev(ctx, args[1:], stdout, stderr)
	case "target":
		return runTarget(ctx, args[1:], stdout, stderr)
	case "version", "--version":
		return runVersion(stdout)
	case "help", "-h", "--help":
		usage(stdout)
		return exitOK
	}
	fmt.Fprintf(stderr, "tempest: unknown command %q\n\n", args[0])
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: tempest <command> [flags]

commands:
  submit FILE [--wait] [--json]   submit a job file; --wait follows it to the end
  blob put FILE | blob stat SUM   upload a file in chunks (prints its SHA-256) or ask whether it is stored
  status ID [--json]              show a job
  watch ID [--json]               follow a job's progress until it ends
  cancel ID                       cancel a job
  results ID [--format FMT]       download a job's results (FMT: json, csv or html)
  jobs [--json]                   list jobs
  cluster [--json]                list nodes, leaders, cores and key ids, and each group's members
  members add ID QUIC_ADDR        add a member to the group of the nodes behind --api (a datacenter's
                                  managers, or the gates): SYNCING until the leader promotes it
  members remove ID               remove a member from that group
  dev --dir DIR                   run a local cluster of real processes until Ctrl-C
  demo                            run a local demo and print what happened
  target                          run the built-in HTTP target (counts requests; GET /__stats)
  version                         print the commit and Go version this binary was built from
  secret generate                 print a strong random AUTH_SECRET
  secret derive --role ROLE       print the key a worker or manager host holds instead of AUTH_SECRET
                                  (read from AUTH_SECRET in the environment)
`)
}

func runSecret(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "derive" {
		return runSecretDerive(args[1:], os.Getenv, stdout, stderr)
	}
	fs := flag.NewFlagSet("secret", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() != 1 || fs.Arg(0) != "generate" {
		fmt.Fprintln(stderr, "usage: tempest secret generate | tempest secret derive --role worker|manager")
		return exitUsage
	}
	s, err := security.GenerateSecret()
	if err != nil {
		fmt.Fprintf(stderr, "tempest: generate secret: %v\n", err)
		return exitUsage
	}
	fmt.Fprintln(stdout, s)
	return exitOK
}

// runSecretDerive prints the role secret for --role derived from
// AUTH_SECRET. The secret comes from the environment, never an argument,
// so it stays out of shell history and ps.
func runSecretDerive(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("secret derive", flag.ContinueOnError)
	fs.SetOutput(stderr)
	role := fs.String("role", "", "worker or manager")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() != 0 || *role == "" {
		fmt.Fprintln(stderr, "usage: AUTH_SECRET=... tempest secret derive --role worker|manager")
		return exitUsage
	}
	tier, err := security.ParseRole(*role)
	if err != nil {
		fmt.Fprintf(stderr, "tempest: %v\n", err)
		return exitUsage
	}
	secret := getenv("AUTH_SECRET")
	if secret == "" {
		fmt.Fprintln(stderr, "tempest: AUTH_SECRET is not set: derive reads the cluster secret from the environment")
		return exitUsage
	}
	s, err := security.DeriveRoleSecret(secret, tier)
	if err != nil {
		fmt.Fprintf(stderr, "tempest: derive %s key: %v\n", *role, err)
		return exitUsage
	}
	fmt.Fprintln(stdout, s)
	return exitOK
}

// errUsage marks errors that are the caller's to fix.
var errUsage = errors.New("usage")
