// Package nodecmd holds what the node binaries (tempest-gate,
// tempest-manager, tempest-worker) share around their startup: the YAML
// config file, the shared flags, the logger, the cluster secrets (read from
// --secret-file over the environment, at startup and again on SIGHUP) and
// the signal loop.
package nodecmd

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"go.yaml.in/yaml/v3"

	"tempest/security"
)

// ReadConfigFile decodes a YAML config over the defaults already in cfg, a
// pointer to the binary's config struct. Unknown keys are errors: a misspelt
// option must not silently keep its default. An empty file changes nothing.
func ReadConfigFile(path string, cfg any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

// SplitList splits a comma-separated flag value, trimming spaces and
// dropping empty items.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// NewLogger builds the logger for --log-format (text or json) and
// --log-level (debug, info, warn or error), writing to w.
func NewLogger(format, level string, w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// KeyringFromEnv builds the keyring from AUTH_SECRET and, during a
// rotation, AUTH_SECRET_PREVIOUS; NewKeyring refuses short or weak secrets
// with a message naming the variable.
func KeyringFromEnv(getenv func(string) string) (*security.Keyring, error) {
	current := getenv("AUTH_SECRET")
	if current == "" {
		return nil, errors.New("AUTH_SECRET is not set (create one with `tempest secret generate`)")
	}
	return security.NewKeyring(current, getenv("AUTH_SECRET_PREVIOUS"))
}

// secretKeys are the variables a --secret-file may hold.
var secretKeys = []string{"AUTH_SECRET", "AUTH_SECRET_PREVIOUS", "TEMPEST_TOKEN"}

// TakeSecrets reads the variables a node takes secrets from (secretKeys
// and TEMPEST_METRICS_TOKEN) out of the process environment and removes
// them from it, so that nothing the node starts — a RainStorm exec program
// above all — inherits them, even through a forgotten os.Environ(). The
// getenv it returns serves them as they were, and any other variable from
// the environment as it is now; a SIGHUP without --secret-file re-reads
// them through it, as it always re-read the unchanging start-up values.
// The node binaries call it first thing in main.
func TakeSecrets() func(string) string {
	taken := map[string]string{}
	for _, k := range append(slices.Clone(secretKeys), "TEMPEST_METRICS_TOKEN") {
		if v, ok := os.LookupEnv(k); ok {
			taken[k] = v
			_ = os.Unsetenv(k)
		}
	}
	return func(k string) string {
		if v, ok := taken[k]; ok {
			return v
		}
		return os.Getenv(k)
	}
}

// StartupEnv is the environment a node starts from: with a secretFile, the
// file's AUTH_SECRET, AUTH_SECRET_PREVIOUS and TEMPEST_TOKEN over getenv's
// (the file is what SIGHUP reloads, so starting from anything else would
// make a restart and a reload disagree); without one, getenv itself. A
// variable the file does not set falls through to getenv. A file that
// cannot be read is an error, never a silent fall back to the environment.
func StartupEnv(secretFile string, getenv func(string) string) (func(string) string, error) {
	if secretFile == "" {
		return getenv, nil
	}
	vals, err := ReadEnvFile(secretFile)
	if err != nil {
		return nil, err
	}
	file := make(map[string]string, len(secretKeys))
	for _, k := range secretKeys {
		if v, ok := vals[k]; ok {
			file[k] = v
		}
	}
	return func(k string) string {
		if v, ok := file[k]; ok {
			return v
		}
		return getenv(k)
	}, nil
}

// Secrets re-reads AUTH_SECRET and AUTH_SECRET_PREVIOUS for a rotation pass
// (SIGHUP): from secretFile when one is configured (a running process's
// environment never changes, so that is how new secrets reach it), else
// through getenv. Previous may be empty; current may not.
func Secrets(secretFile string, getenv func(string) string) (current, previous string, err error) {
	get := getenv
	if secretFile != "" {
		vals, err := ReadEnvFile(secretFile)
		if err != nil {
			return "", "", err
		}
		get = func(k string) string { return vals[k] }
	}
	current = get("AUTH_SECRET")
	if current == "" {
		return "", "", errors.New("AUTH_SECRET is not set")
	}
	return current, get("AUTH_SECRET_PREVIOUS"), nil
}

// ReadEnvFile reads the KEY=VALUE file at path; see ParseEnv.
func ReadEnvFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("secret file: %w", err)
	}
	defer f.Close()
	return ParseEnv(f, path)
}

// ParseEnv parses KEY=VALUE lines as systemd's EnvironmentFile does for the
// simple cases: blank lines and # comments skipped, an optional "export "
// prefix, values optionally in single or double quotes. Double-quoted values
// have their Go-style escapes undone when they parse as such; single-quoted
// ones are taken as they stand. name labels errors (file:line).
func ParseEnv(r io.Reader, name string) (map[string]string, error) {
	vals := make(map[string]string)
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		text = strings.TrimPrefix(text, "export ")
		key, val, ok := strings.Cut(text, "=")
		key = strings.TrimSpace(key)
		if !ok || key == "" {
			// The line may hold a secret: say where, never what.
			return nil, fmt.Errorf("%s:%d: not a KEY=VALUE line", name, line)
		}
		val = strings.TrimSpace(val)
		if len(val) >= 2 && (val[0] == '"' || val[0] == '\'') && val[len(val)-1] == val[0] {
			if val[0] == '"' {
				if uq, err := strconv.Unquote(val); err == nil {
					val = uq
				} else {
					val = val[1 : len(val)-1]
				}
			} else {
				val = val[1 : len(val)-1]
			}
		}
		vals[key] = val
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return vals, nil
}

// ParsePeers reads a --peers flag, "id=quicaddr,id=quicaddr", making each
// entry with peer (the role's own Peer type).
func ParsePeers[P any](s string, peer func(id, addr string) P) ([]P, error) {
	var out []P
	for _, item := range SplitList(s) {
		id, addr, ok := strings.Cut(item, "=")
		id, addr = strings.TrimSpace(id), strings.TrimSpace(addr)
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("--peers: %q is not id=quicaddr", item)
		}
		out = append(out, peer(id, addr))
	}
	return out, nil
}

// CheckPrivateFile refuses a secret file another user could read: it must
// be owned by euid (the node's user) with no permission for group or
// others (0600 or tighter). A worker whose exec programs run as another
// user (exec.user) relies on it: they must not read the node's secrets.
func CheckPrivateFile(path string, euid int) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("secret file: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("secret file %s is mode %04o, readable beyond its owner: chmod 600 it", path, perm)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != euid {
		return fmt.Errorf("secret file %s belongs to uid %d, not to this node's user (uid %d): chown it", path, st.Uid, euid)
	}
	return nil
}
