package devcluster

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"tempest/internal/testutil"
	"tempest/security/securitytest"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

// SetSecrets rewrites the node's secret file (0600, values quoted as
// nodecmd.ParseEnv and systemd read them) and the environment its next
// start gets; a launcher's own secrets never leak into a node.
func TestSetSecrets(t *testing.T) {
	t.Setenv("AUTH_SECRET_PREVIOUS", "from-the-launcher")
	dir := t.TempDir()
	old, next := securitytest.Secret(t), securitytest.Secret(t)
	c := &Cluster{opts: Options{Dir: dir, Datacenter: "dc1", Secret: old, Token: "tok"}}
	m, err := c.newNode("manager", "dc1", "dc1-manager-1")
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.newNode("worker", "dc1", "dc1-worker-1")
	if err != nil {
		t.Fatal(err)
	}
	if m.SecretFile != filepath.Join(dir, "dc1-manager-1", "secret.env") {
		t.Fatalf("secret file at %s", m.SecretFile)
	}

	for _, tc := range []struct {
		name              string
		node              *Node
		current, previous string
		want              map[string]string
	}{
		// Each node holds its role's key, derived from the cluster secret.
		{"initial worker", w, "", "", map[string]string{"AUTH_SECRET": role(t, "worker", old)}},
		{"install on a manager", m, old, next, map[string]string{"AUTH_SECRET": role(t, "manager", old), "AUTH_SECRET_PREVIOUS": role(t, "manager", next), "TEMPEST_TOKEN": "tok"}},
		{"use", m, next, old, map[string]string{"AUTH_SECRET": role(t, "manager", next), "AUTH_SECRET_PREVIOUS": role(t, "manager", old), "TEMPEST_TOKEN": "tok"}},
		{"remove", w, next, "", map[string]string{"AUTH_SECRET": role(t, "worker", next)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.current != "" {
				if err := c.SetSecrets(tc.node.Name, tc.current, tc.previous); err != nil {
					t.Fatal(err)
				}
			}
			st, err := os.Stat(tc.node.SecretFile)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != 0o600 {
				t.Fatalf("secret file mode %v", st.Mode().Perm())
			}
			b, err := os.ReadFile(tc.node.SecretFile)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, line := range strings.Split(string(b), "\n") {
				k, v, ok := strings.Cut(line, "=")
				if !ok || strings.HasPrefix(line, "#") {
					continue
				}
				if got[k], err = strconv.Unquote(v); err != nil {
					t.Fatalf("%s: %v", line, err)
				}
			}
			if !maps.Equal(got, tc.want) {
				t.Fatalf("file holds %v, want %v", got, tc.want)
			}
			env := c.nodeEnv(tc.node)
			for k, v := range tc.want {
				if !slices.Contains(env, k+"="+v) {
					t.Errorf("environment lacks %s", k)
				}
			}
			if _, ok := tc.want["AUTH_SECRET_PREVIOUS"]; !ok && slices.Contains(env, "AUTH_SECRET_PREVIOUS=from-the-launcher") {
				t.Errorf("the launcher's AUTH_SECRET_PREVIOUS reached the node")
			}
		})
	}

	if err := c.SetSecrets(w.Name, strings.Repeat("a", 40), ""); err == nil || !strings.Contains(err.Error(), "AUTH_SECRET") {
		t.Fatalf("weak secret: %v", err)
	}
	if err := c.SetSecrets("nobody", next, ""); err == nil {
		t.Fatal("unknown node accepted")
	}
}

// A placed node binds every listener to its own address on fixed ports and
// runs under its prefix; without Place, nodes stay on loopback.
func TestPlacement(t *testing.T) {
	dir := t.TempDir()
	c := &Cluster{opts: Options{Dir: dir, Datacenter: "dc1", Secret: securitytest.Secret(t), Token: "tok",
		Place: func(name, role, dc string) (Placement, error) {
			return Placement{IP: "10.213.7.3", Prefix: []string{"ip", "netns", "exec", "ns-" + name}}, nil
		}}}
	n, err := c.newNode("manager", "dc1", "dc1-manager-1")
	if err != nil {
		t.Fatal(err)
	}
	api, err := c.addr(n, placedAPI, freeTCP)
	if err != nil {
		t.Fatal(err)
	}
	if n.QUIC != "10.213.7.3:7101" || n.Swim != "10.213.7.3:7102" || api != "10.213.7.3:7103" {
		t.Errorf("placed node listens on %s, %s, %s", n.QUIC, n.Swim, api)
	}
	if strings.Join(n.Prefix, " ") != "ip netns exec ns-dc1-manager-1" {
		t.Errorf("prefix %q", n.Prefix)
	}

	loop := &Cluster{opts: Options{Dir: t.TempDir(), Datacenter: "dc1", Secret: securitytest.Secret(t), Token: "tok"}}
	m, err := loop.newNode("manager", "dc1", "dc1-manager-1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(m.QUIC, "127.0.0.1:") || !strings.HasPrefix(m.Swim, "127.0.0.1:") || len(m.Prefix) != 0 {
		t.Errorf("unplaced node: %s %s %q", m.QUIC, m.Swim, m.Prefix)
	}
}

func role(t *testing.T, r, secret string) string {
	t.Helper()
	s, err := roleSecret(r, secret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
