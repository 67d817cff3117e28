package jobfile

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"tempest/workflow"
)

// EnvLookup returns the value of an environment variable a job file names
// as {{env.NAME}}: `tempest submit` looks in its --env flags, then in its
// own environment; a server looks in what the submitter sent.
type EnvLookup func(name string) (string, bool)

// WithEnv fills {{env.NAME}} references in the job file's string values
// from lookup before anything else reads them. Without it every reference
// is a problem at its line: variables are filled in where the job file is
// submitted, never from a server's own environment.
func WithEnv(lookup EnvLookup) Option {
	return func(o *options) { o.env = lookup }
}

const (
	envOpen = "{{env."
	// maxEnvValue bounds one variable's value; a job file is at most
	// MaxFileSize, and a variable must not make it much larger.
	maxEnvValue = 64 << 10
	// maxEnvExpansion bounds what all references together add.
	maxEnvExpansion = MaxFileSize
)

// substituteEnv replaces {{env.NAME}} in every string scalar under n. A
// value that is one reference and nothing else is read again as a YAML
// plain scalar would be, so `vus: "{{env.VUS}}"` with VUS=50 is the number
// 50 (a reference must be quoted: a bare {{ opens a YAML flow mapping);
// embedded references stay strings. Other templates ({{vu}},
// {{secret.NAME}}) are left for the workflow type.
func substituteEnv(n *workflow.Node, path string, lookup EnvLookup) []Problem {
	s := envSubst{lookup: lookup}
	s.walk(n, path)
	return s.problems
}

type envSubst struct {
	lookup   EnvLookup
	added    int
	problems []Problem
}

func (s *envSubst) walk(n *workflow.Node, path string) {
	if n == nil || n.Invalid {
		return
	}
	switch n.Kind {
	case workflow.MapNode:
		for _, f := range n.Fields {
			s.walk(f.Value, workflow.JoinPath(path, f.Key))
		}
	case workflow.ListNode:
		for i, it := range n.Items {
			s.walk(it, workflow.IndexPath(path, i))
		}
	case workflow.ScalarNode:
		str, ok := n.Value.(string)
		if !ok || !strings.Contains(str, envOpen) {
			return
		}
		out, whole, err := s.expand(str)
		if err != nil {
			s.problems = append(s.problems, Problem{Line: n.Line, Path: path, Message: err.Error()})
			n.Invalid = true // reported: readers add no complaint of their own
			return
		}
		n.Value, n.Text = out, out
		if whole {
			n.Value = plainScalar(out)
		}
	}
}

// expand replaces every reference in str; whole reports that str was one
// reference alone.
func (s *envSubst) expand(str string) (out string, whole bool, err error) {
	var b strings.Builder
	rest := str
	refs := 0
	for {
		i := strings.Index(rest, envOpen)
		if i < 0 {
			b.WriteString(rest)
			break
		}
		b.WriteString(rest[:i])
		end := strings.Index(rest[i:], "}}")
		if end < 0 {
			return "", false, fmt.Errorf("unclosed {{env.")
		}
		name := strings.TrimSpace(rest[i+len(envOpen) : i+end])
		if !isEnvName(name) {
			return "", false, fmt.Errorf("{{env.%s}}: an environment variable's name is letters, digits and _, not starting with a digit", truncateName(name))
		}
		v, ok := "", false
		if s.lookup != nil {
			v, ok = s.lookup(name)
		}
		switch {
		case !ok:
			return "", false, fmt.Errorf("{{env.%s}}: %s is not set; set it in the environment of tempest submit or pass --env %s=VALUE", name, name, name)
		case len(v) > maxEnvValue:
			return "", false, fmt.Errorf("{{env.%s}}: the value is %d bytes, more than %d", name, len(v), maxEnvValue)
		}
		if s.added += len(v); s.added > maxEnvExpansion {
			return "", false, fmt.Errorf("{{env.%s}}: environment values add more than %d bytes to the job file", name, maxEnvExpansion)
		}
		b.WriteString(v)
		refs++
		rest = rest[i+end+2:]
	}
	whole = refs == 1 && strings.HasPrefix(strings.TrimSpace(str), envOpen) && strings.HasSuffix(strings.TrimSpace(str), "}}")
	return b.String(), whole, nil
}

// plainScalar reads v as YAML reads an unquoted scalar: a number or a
// boolean where it is one, else the string.
func plainScalar(v string) any {
	if v == "" || strings.ContainsAny(v, "\n:#{}[],&*!|>'\"%@`") {
		return v
	}
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(v), &n); err != nil || len(n.Content) != 1 || n.Content[0].Kind != yaml.ScalarNode {
		return v
	}
	sc := n.Content[0]
	switch sc.ShortTag() {
	case "!!int":
		var i int64
		if sc.Decode(&i) == nil {
			return i
		}
	case "!!float":
		var f float64
		if sc.Decode(&f) == nil {
			return f
		}
	case "!!bool":
		var b bool
		if sc.Decode(&b) == nil {
			return b
		}
	}
	return v
}

// isEnvName accepts POSIX-style variable names.
func isEnvName(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func truncateName(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
