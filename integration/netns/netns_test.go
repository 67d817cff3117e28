package netns

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"tempest/internal/testutil"
)

// helperEnv makes the test binary, re-executed inside a namespace, serve
// HTTP on the address it names instead of running tests.
const helperEnv = "NETNS_TEST_SERVE"

func TestMain(m *testing.M) {
	if addr := os.Getenv(helperEnv); addr != "" {
		_ = http.ListenAndServe(addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
		os.Exit(1)
	}
	testutil.VerifyNoLeaks(m)
}

func newNet(t *testing.T) *Net {
	t.Helper()
	if err := Check(); err != nil {
		t.Skipf("partition harness cannot run here: %v", err)
	}
	n, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return n
}

// serve runs an HTTP server inside nd's namespace on port.
func serve(t *testing.T, nd *Node, port int) string {
	t.Helper()
	addr := fmt.Sprintf("%s:%d", nd.IP, port)
	args := append(nd.Exec(), os.Args[0])
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), helperEnv+"="+addr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	for reach("", addr) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("helper in %s never served %s", nd.NS, addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return addr
}

// reach connects to addr from inside ns ("" for the test's own namespace).
func reach(ns, addr string) error {
	if ns == "" {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}
	host, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "timeout", "1", "bash", "-c",
		fmt.Sprintf("exec 3<>/dev/tcp/%s/%s", host, port)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Nodes reach each other and the test's namespace; a cut stops exactly
// the pair it names, both ways; heal restores it; a one-way cut and loss
// show in the node's table; a node whose link is down is unreachable.
func TestCutHealAndLinkDown(t *testing.T) {
	n := newNet(t)
	a, err := n.Add("a")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := n.Add("b")
	c, _ := n.Add("c")
	bAddr := serve(t, b, 7001)
	aAddr := serve(t, a, 7001)
	if err := reach(c.NS, bAddr); err != nil {
		t.Fatalf("c cannot reach b: %v", err)
	}
	// The test's namespace reaches the nodes, and the nodes reach it.
	l, err := net.Listen("tcp", n.HostIP()+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if err := reach(a.NS, l.Addr().String()); err != nil {
		t.Fatalf("a cannot reach the host: %v", err)
	}

	if err := n.Cut("a", "b"); err != nil {
		t.Fatal(err)
	}
	// The packets vanish: the connect times out rather than failing at
	// once as a local firewall refusal would.
	if err := reach(a.NS, bAddr); err == nil {
		t.Fatal("a reached b across a cut")
	} else if !strings.Contains(err.Error(), "exit status 124") {
		t.Errorf("a's connect across the cut failed without timing out: %v", err)
	}
	if err := reach(b.NS, aAddr); err == nil {
		t.Fatal("b reached a across a cut")
	}
	if err := reach(c.NS, bAddr); err != nil {
		t.Fatalf("the cut a|b stopped c: %v", err)
	}
	if err := reach("", bAddr); err != nil {
		t.Fatalf("the cut a|b stopped the host: %v", err)
	}
	if err := n.Heal(); err != nil {
		t.Fatal(err)
	}
	if err := reach(a.NS, bAddr); err != nil {
		t.Fatalf("a cannot reach b after heal: %v", err)
	}

	if err := n.CutOneWay("a", "c"); err != nil {
		t.Fatal(err)
	}
	if err := n.Loss("b", 30); err != nil {
		t.Fatal(err)
	}
	rules, err := n.Rules()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rules, "ip saddr "+a.IP+" ip daddr "+c.IP+" drop") || strings.Contains(rules, "ip saddr "+c.IP+" ip daddr "+a.IP) {
		t.Errorf("one-way cut a to c:\n%s", rules)
	}
	if !strings.Contains(rules, "ip saddr "+b.IP+" ip daddr != "+n.HostIP()+" numgen random mod 100 < 30 drop") {
		t.Errorf("b's loss rule:\n%s", rules)
	}
	if err := n.Loss("b", 100); err != nil {
		t.Fatal(err)
	}
	if err := reach(c.NS, bAddr); err == nil {
		t.Fatal("c reached b through 100% loss")
	}
	if err := reach("", bAddr); err != nil {
		t.Fatalf("loss on b stopped the test's own traffic: %v", err)
	}
	if err := n.Heal("b"); err != nil {
		t.Fatal(err)
	}
	if err := reach(c.NS, bAddr); err != nil {
		t.Fatalf("c cannot reach b after heal: %v", err)
	}

	if err := n.LinkDown("b"); err != nil {
		t.Fatal(err)
	}
	if err := reach("", bAddr); err == nil {
		t.Fatal("reached b with its link down")
	}
	if err := n.LinkUp("b"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for reach("", bAddr) != nil {
		if time.Now().After(deadline) {
			t.Fatal("b unreachable after its link came back")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Sweep removes what a dead run left and keeps a live run's namespaces.
func TestSweepRemovesLeftoversOfDeadRuns(t *testing.T) {
	n := newNet(t)
	// A pid that is not running: find one above the live range.
	dead := 4194000
	for alive(dead) {
		dead--
	}
	stale := fmt.Sprintf("%s%d-stale", namePrefix, dead)
	if err := run("ip", "netns", "add", stale); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", stale).Run() })
	if err := Sweep(); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command("ip", "netns", "list").Output()
	if strings.Contains(string(out), stale) {
		t.Errorf("sweep left %s", stale)
	}
	if !strings.Contains(string(out), n.bridge) {
		t.Errorf("sweep removed the live run's %s", n.bridge)
	}
}
