package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"

	"tempest/api"
	"tempest/internal/jobfile"
)

// submitVars fills a job file's {{env.NAME}} and {{secret.NAME}}
// references: from --env and --secret, then from this process's
// environment. It records the names the job file used, so only their values
// leave this machine (not the whole environment).
//
// It also reads the files a workflow's tls: names, relative to dir (the job
// file's folder), and keeps them to send: they never become blobs.
type submitVars struct {
	env, secrets assignFlag
	getenv       func(string) (string, bool)
	dir          string

	mu                   sync.Mutex
	usedEnv, usedSecrets map[string]string
	tlsFiles             map[string][]byte
}

func newSubmitVars(fs *flag.FlagSet) *submitVars {
	v := &submitVars{getenv: os.LookupEnv}
	fs.Var(&v.env, "env", "set {{env.NAME}} in the job file: `NAME=VALUE` (repeatable; default: NAME from this environment)")
	fs.Var(&v.secrets, "secret", "set {{secret.NAME}}, a value never shown back by status, results or logs: `NAME=VALUE` (repeatable; default: NAME from this environment)")
	return v
}

// options are the job-file options every parse of one submission uses.
func (v *submitVars) options() []jobfile.Option {
	return []jobfile.Option{
		jobfile.WithEnv(func(name string) (string, bool) { return v.lookup(name, v.env, &v.usedEnv) }),
		jobfile.WithSecrets(func(name string) (string, bool) { return v.lookup(name, v.secrets, &v.usedSecrets) }),
		jobfile.WithTLSFiles(v.readTLS),
	}
}

// readTLS reads a tls: file beside the job file and keeps it to send.
func (v *submitVars) readTLS(name string) ([]byte, error) {
	b, err := jobfile.DirDataFiles(v.dir)(name)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.tlsFiles == nil {
		v.tlsFiles = map[string][]byte{}
	}
	v.tlsFiles[name] = b
	return b, nil
}

func (v *submitVars) lookup(name string, flags assignFlag, used *map[string]string) (string, bool) {
	val, ok := flags.get(name)
	if !ok {
		val, ok = v.getenv(name)
	}
	if !ok {
		return "", false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if *used == nil {
		*used = map[string]string{}
	}
	(*used)[name] = val
	return val, true
}

// sent is what goes to the cluster with the job file.
func (v *submitVars) sent() api.SubmitVars {
	v.mu.Lock()
	defer v.mu.Unlock()
	return api.SubmitVars{Env: v.usedEnv, Secrets: v.usedSecrets, TLSFiles: v.tlsFiles}
}

// assignFlag collects NAME=VALUE flags; a later one for a name wins.
type assignFlag []string

func (a *assignFlag) String() string {
	if a == nil {
		return ""
	}
	names := make([]string, 0, len(*a))
	for _, kv := range *a {
		name, _, _ := strings.Cut(kv, "=")
		names = append(names, name) // never the value: it may be a secret
	}
	return strings.Join(names, ",")
}

func (a *assignFlag) Set(kv string) error {
	name, _, ok := strings.Cut(kv, "=")
	if !ok || name == "" {
		return errors.New("want NAME=VALUE")
	}
	if strings.ContainsAny(name, " \t{}.") {
		return fmt.Errorf("%q is not a variable name", name)
	}
	*a = append(*a, kv)
	return nil
}

func (a assignFlag) get(name string) (string, bool) {
	for i := len(a) - 1; i >= 0; i-- {
		if n, v, _ := strings.Cut(a[i], "="); n == name {
			return v, true
		}
	}
	return "", false
}
