package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"tempest/api"
	"tempest/internal/jobfile"
	"tempest/wire"
)

// Exit codes (README) beside main.go's exitOK and exitUsage.
const (
	exitThresholds = 1 // a threshold failed; see exitFor
	exitJobFailed  = 2 // the job ended FAILED, CANCELLED or TIMEOUT for another reason
)

// Where the client commands find the API when no flag says.
const (
	envAPI   = "TEMPEST_API"   // comma-separated base URLs
	envToken = "TEMPEST_TOKEN" // bearer token
	envCA    = "TEMPEST_CA"    // PEM CA file to verify the API's certificate
	envCert  = "TEMPEST_CERT"  // PEM client certificate, for an API that requires one
	envKey   = "TEMPEST_KEY"   // its key
)

// apiFlags are the connection flags every client command takes.
type apiFlags struct {
	endpoints string
	token     string
	// ca, cert, key: TLS files (api.ClientTLS).
	ca, cert, key string
}

func (f *apiFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.endpoints, "api", "", "API base URL(s), comma-separated, tried in order (env "+envAPI+", default "+api.DefaultURL+")")
	fs.StringVar(&f.token, "token", "", "API bearer token (env "+envToken+"; prefer the env var: flags show in ps)")
	fs.StringVar(&f.ca, "ca", "", "PEM file of the CA(s) that signed the API's certificate, instead of the system roots (env "+envCA+")")
	fs.StringVar(&f.cert, "cert", "", "PEM client certificate, for an API that requires one (mutual TLS; env "+envCert+")")
	fs.StringVar(&f.key, "key", "", "PEM key of --cert (env "+envKey+")")
}

// client builds the API client; flags win over the environment.
func (f *apiFlags) client() (*api.Client, error) {
	endpoints := f.endpoints
	if endpoints == "" {
		endpoints = os.Getenv(envAPI)
	}
	if endpoints == "" {
		endpoints = api.DefaultURL
	}
	token := f.token
	if token == "" {
		token = os.Getenv(envToken)
	}
	if token == "" {
		return nil, fmt.Errorf("%w: no API token: set %s or pass --token", errUsage, envToken)
	}
	tlsCfg, err := api.ClientTLS(cmp.Or(f.ca, os.Getenv(envCA)), cmp.Or(f.cert, os.Getenv(envCert)), cmp.Or(f.key, os.Getenv(envKey)))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	var opts []api.ClientOption
	if tlsCfg != nil {
		opts = append(opts, api.WithTLSConfig(tlsCfg))
	}
	c, err := api.NewClient(strings.Split(endpoints, ","), token, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	return c, nil
}

// newFlagSet makes a command's flag set; synopsis is its usage line.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: tempest %s\n\nflags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseArgs parses flags wherever they appear, so `submit job.yaml --wait`
// works as well as `submit --wait job.yaml` (package flag alone stops at
// the first argument). "--" ends flag parsing.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// parseCommand parses args and checks the number of arguments. It returns
// ok=false with the exit code when the command should stop.
func parseCommand(fs *flag.FlagSet, args []string, want int, stderr io.Writer) (positional []string, code int, ok bool) {
	positional, err := parseArgs(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil, exitOK, false
	}
	if err != nil {
		return nil, exitUsage, false // flag has printed the problem and usage
	}
	if len(positional) != want {
		fmt.Fprintf(stderr, "tempest %s: want %d argument(s), got %d\n", fs.Name(), want, len(positional))
		fs.Usage()
		return nil, exitUsage, false
	}
	return positional, exitOK, true
}

// openCommand is parseCommand followed by a client for the command's
// endpoints: the start every job command shares. The caller closes the
// client.
func openCommand(fs *flag.FlagSet, conn *apiFlags, args []string, want int, stderr io.Writer) (*api.Client, []string, int, bool) {
	positional, code, ok := parseCommand(fs, args, want, stderr)
	if !ok {
		return nil, nil, code, false
	}
	c, err := conn.client()
	if err != nil {
		return nil, nil, reportError(stderr, err), false
	}
	return c, positional, exitOK, true
}

// reportError prints err as one clear line (a bad job file's problems one
// per line, as compilers do) and returns the exit code: every error a
// client command meets is a usage or connection error.
func reportError(stderr io.Writer, err error) int {
	var unreachable *api.UnreachableError
	var apiErr *api.Error
	switch {
	case errors.As(err, &unreachable):
		fmt.Fprintf(stderr, "tempest: %v (set --api or %s)\n", unreachable, envAPI)
	case errors.As(err, &apiErr) && apiErr.Status == http.StatusUnauthorized:
		fmt.Fprintf(stderr, "tempest: %s refused the API token (check --token or %s)\n", apiErr.Endpoint, envToken)
	case errors.As(err, &apiErr) && len(apiErr.Problems) > 0:
		fmt.Fprintf(stderr, "tempest: %s\n", apiErr.Message)
	case errors.As(err, &apiErr):
		fmt.Fprintf(stderr, "tempest: %s\n", oneLine(apiErr.Error()))
	default:
		fmt.Fprintf(stderr, "tempest: %s\n", oneLine(strings.TrimPrefix(err.Error(), errUsage.Error()+": ")))
	}
	return exitUsage
}

// reportProblems prints a rejected job file's problems as file:line: path:
// message, one per line, so editors can jump to them.
func reportProblems(stderr io.Writer, filename string, err error) bool {
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || len(apiErr.Problems) == 0 {
		return false
	}
	fmt.Fprintln(stderr, (&jobfile.Error{File: filename, Problems: apiErr.Problems}).Error())
	return true
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// exitFor maps a job's final status to the exit code:
//   - COMPLETED: 1 if any threshold failed, else 0;
//   - FAILED because an abort_on_fail threshold ended it: 1, since the
//     thresholds are the reason, and a CI job should read it as "the system
//     under test was too slow" rather than "Tempest could not run the test";
//   - FAILED for any other reason, CANCELLED, TIMEOUT: 2, even if
//     thresholds failed as well — the run did not finish, so its numbers are
//     not the verdict.
func exitFor(st api.JobStatus) int {
	switch {
	case st.Status == wire.JobCompleted && st.ThresholdsFailed:
		return exitThresholds
	case st.Status == wire.JobCompleted:
		return exitOK
	case st.Status == wire.JobFailed && st.ThresholdAbort:
		return exitThresholds
	}
	return exitJobFailed
}

func printJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // stdout closed: nothing useful to do
}
