package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"tempest/api"
	"tempest/internal/devcluster"
)

// node is one process of the cluster as the benchmark sees it.
type node struct {
	Name string `json:"name"`
	Role string `json:"role"`
	PID  int    `json:"pid"`
	API  string `json:"api,omitempty"` // http://host:port, managers only
	Log  string `json:"log"`
}

// cluster is the running devcluster plus what the benchmark needs of it.
type cluster struct {
	dc        *devcluster.Cluster
	leader    node
	followers []node
	workers   []node
	// client talks to the leader's API only, so no request pays a
	// follower's forwarding hop.
	client *api.Client
	hc     *http.Client
	// term is the leader's term when it was found.
	term float64
}

func startCluster(ctx context.Context, dir, binDir string, managers, workers, cores int, swimProfile, electionProfile string) (*cluster, error) {
	dc, err := devcluster.Start(ctx, devcluster.Options{
		Dir: dir, BinDir: binDir, Managers: managers, Workers: workers, CoresPerWorker: cores,
		SwimProfile: swimProfile, ElectionProfile: electionProfile,
		// One client IP submits from C goroutines and scrapes /metrics:
		// the API's per-IP limit (50/s) would make the benchmark measure
		// the limiter, and a refused scrape ends the run.
		ManagerConfig: map[string]any{"api_rate_limit": 1e6, "api_rate_burst": 1_000_000},
	})
	if err != nil {
		return nil, err
	}
	c := &cluster{dc: dc, hc: &http.Client{Timeout: 10 * time.Second}}
	if err := c.findLeader(ctx); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// findLeader waits for the cluster to be ready and points the benchmark at
// its leader.
func (c *cluster) findLeader(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	view, err := c.dc.WaitReady(rctx)
	if err != nil {
		return err
	}
	leaderName := ""
	for _, n := range view.Nodes {
		if n.Role == "manager" && n.IsLeader {
			leaderName = n.Name
		}
	}
	c.leader, c.followers, c.workers = node{}, nil, nil
	for _, n := range c.dc.Nodes() {
		nn := node{Name: n.Name, Role: n.Role, PID: n.PID, Log: n.Log}
		if n.API != "" {
			nn.API = "http://" + n.API
		}
		switch {
		case n.Name == leaderName:
			c.leader = nn
		case n.Role == "manager":
			c.followers = append(c.followers, nn)
		default:
			c.workers = append(c.workers, nn)
		}
	}
	if c.leader.PID == 0 {
		return fmt.Errorf("leader %q is not one of the started nodes", leaderName)
	}
	if c.client != nil {
		c.client.Close()
	}
	if c.client, err = api.NewClient([]string{c.leader.API}, c.dc.Token()); err != nil {
		return err
	}
	m, err := c.scrape(ctx, c.leader)
	if err != nil {
		return err
	}
	c.term = m["tempest_manager_term"]
	return nil
}

func (c *cluster) stop() {
	if c.client != nil {
		c.client.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c.dc.Stop(ctx)
}

func (c *cluster) managers() []node { return append([]node{c.leader}, c.followers...) }

func (c *cluster) all() []node { return append(c.managers(), c.workers...) }

// leadershipChanged reports whether the manager the benchmark talks to no
// longer leads in the term it led when found: an election in the middle of a
// measurement makes it meaningless.
func (c *cluster) leadershipChanged(ctx context.Context) (string, error) {
	m, err := c.scrape(ctx, c.leader)
	if err != nil {
		return "", err
	}
	if m["tempest_manager_is_leader"] != 1 || m["tempest_manager_term"] != c.term {
		return fmt.Sprintf("leadership changed: %s was leader in term %.0f, now is_leader=%.0f in term %.0f",
			c.leader.Name, c.term, m["tempest_manager_is_leader"], m["tempest_manager_term"]), nil
	}
	return "", nil
}

// metrics is one scrape of a manager's /metrics: series (with labels, as
// written) → value.
type metrics map[string]float64

// scrapedFamilies are the families the bench reads. It names them
// (name[]) so that a manager builds neither the live jobs' series nor their
// text: with a few hundred jobs running those are megabytes, and building
// them once a second cost the leader about a third of its CPU, charged to
// provisioning. A Prometheus server scraping every 15 s pays a fifteenth
// of that.
var scrapedFamilies = url.Values{"name[]": {
	"tempest_manager_workflows", "tempest_manager_is_leader", "tempest_manager_term",
	"tempest_transport_messages_out_total", "tempest_transport_messages_in_total",
}}.Encode()

// scrape reads a manager's Prometheus text. /metrics needs no token.
func (c *cluster) scrape(ctx context.Context, n node) (metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.API+"/metrics?"+scrapedFamilies, nil)
	if err != nil {
		return nil, err
	}
	// Go's client asks for gzip by default, and compressing the leader's
	// exposition (megabytes with many live jobs) for a loopback read cost
	// the leader about 5 % of its CPU, charged to provisioning.
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("GET %s/metrics: %s: %s", n.API, resp.Status, b)
	}
	m := make(metrics)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		m[line[:i]] = v
	}
	return m, sc.Err()
}

// started is how many workflows the manager has seen reach RUNNING or a
// later status: every status but PENDING and ASSIGNED. Workflows are never
// forgotten during a run (retention is a week), so this only grows, unless
// a workflow is retried (taken back to PENDING), which the run reports.
func (m metrics) started() float64 {
	var n float64
	for _, s := range []string{"RUNNING", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"} {
		n += m[`tempest_manager_workflows{status="`+s+`"}`]
	}
	return n
}

func (m metrics) workflows(status string) float64 {
	return m[`tempest_manager_workflows{status="`+status+`"}`]
}

func (m metrics) msgsOut() float64 { return m["tempest_transport_messages_out_total"] }
func (m metrics) msgsIn() float64  { return m["tempest_transport_messages_in_total"] }

// sleepJob is a job file of n one-core sleep workflows of duration d.
func sleepJob(name string, n int, d time.Duration) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\ntimeout: 120s\nworkflows:\n", name)
	for i := range n {
		fmt.Fprintf(&b, "  - {name: w%d, type: sleep, cores: 1, duration: %s}\n", i, d)
	}
	return []byte(b.String())
}
