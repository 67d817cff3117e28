package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"tempest/api"
	"tempest/integration/checker"
	"tempest/integration/netns"
	"tempest/internal/devcluster"
	"tempest/internal/target"
	"tempest/internal/testutil"
)

// pcluster is a cluster whose every node runs in its own network
// namespace (integration/netns), with a history the checker judges: every
// submission and its answer, every status polled, every leader and term
// and fence token seen, and each job's own target.
type pcluster struct {
	*cluster
	net  *netns.Net
	hist *checker.History

	mu      sync.Mutex
	targets map[string]*target.Server // by submission key
	jobs    map[string]string         // job id → key, for acked and unknown-with-id submissions
	seq     int
	latest  map[string]nodeObs // by node name, from its own /metrics

	stopObs context.CancelFunc
	obsDone chan struct{}
}

// nodeObs is one node's own word on leadership.
type nodeObs struct {
	group   string
	leading bool
	term    uint64
	at      time.Time
}

// startPartitioned starts a cluster laid out by opts with every node in a
// namespace of its own, and starts recording. It skips the test where
// namespaces cannot be made (not root, no netns support).
func startPartitioned(t *testing.T, opts devcluster.Options) *pcluster {
	t.Helper()
	if err := netns.Install(context.Background()); err != nil {
		t.Logf("installing the partition suite's tools: %v", err)
	}
	if err := netns.Check(); err != nil {
		t.Skipf("partition suite skipped: %v", err)
	}
	nw, err := netns.New()
	if err != nil {
		t.Fatalf("network: %v", err)
	}
	// Registered first, so it runs last: after the cluster's processes
	// (which keep their namespaces alive) are stopped.
	t.Cleanup(func() {
		if err := nw.Close(); err != nil {
			t.Errorf("network cleanup: %v", err)
		}
	})
	opts.Place = func(name, role, dc string) (devcluster.Placement, error) {
		nd, err := nw.Add(name)
		if err != nil {
			return devcluster.Placement{}, err
		}
		return devcluster.Placement{IP: nd.IP, Prefix: nd.Exec()}, nil
	}
	if opts.CoresPerWorker == 0 {
		opts.CoresPerWorker = 2
	}
	p := &pcluster{net: nw, hist: checker.New(), targets: map[string]*target.Server{}, jobs: map[string]string{},
		latest: map[string]nodeObs{}}
	p.cluster = startWith(t, opts)
	// Runs before the cluster's own cleanup removes its directory.
	t.Cleanup(func() {
		if dir := os.Getenv("PARTITION_KEEP_LOGS"); dir != "" && (t.Failed() || os.Getenv("PARTITION_KEEP_ALL") != "") {
			keepNodeLogs(t, p.cluster, filepath.Join(dir, t.Name()))
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	p.stopObs, p.obsDone = cancel, make(chan struct{})
	go p.observe(ctx)
	t.Cleanup(p.stopObserving)
	return p
}

func (p *pcluster) stopObserving() {
	p.stopObs()
	<-p.obsDone
}

// observe polls every node's /metrics (leadership and term, as the node
// itself says) and every known job's status (fence tokens, terminal
// states) until ctx ends.
func (p *pcluster) observe(ctx context.Context) {
	defer close(p.obsDone)
	hc := &http.Client{Timeout: 700 * time.Millisecond}
	defer hc.CloseIdleConnections()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		var wg sync.WaitGroup
		for _, n := range p.Nodes() {
			if n.API == "" {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.pollMetrics(ctx, hc, n)
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.pollJobs(ctx)
		}()
		wg.Wait()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (p *pcluster) pollMetrics(ctx context.Context, hc *http.Client, n *devcluster.Node) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.API+"/metrics", nil)
	if err != nil {
		return
	}
	resp, err := hc.Do(req)
	if err != nil {
		return // cut off, paused or down: no word from it
	}
	defer resp.Body.Close()
	prefix := "tempest_" + n.Role + "_"
	var leading, haveTerm bool
	var term uint64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		switch name {
		case prefix + "is_leader":
			leading = val == "1"
		case prefix + "term":
			f, err := strconv.ParseFloat(val, 64)
			if err == nil {
				term, haveTerm = uint64(f), true
			}
		}
	}
	if !haveTerm {
		return
	}
	group := n.DC
	if n.Role == "gate" {
		group = "gates"
	}
	now := time.Now()
	p.hist.AddTerm(group, n.Name, term, leading, now)
	p.mu.Lock()
	p.latest[n.Name] = nodeObs{group: group, leading: leading, term: term, at: now}
	p.mu.Unlock()
}

func (p *pcluster) pollJobs(ctx context.Context) {
	p.mu.Lock()
	ids := slices.Collect(maps.Keys(p.jobs))
	p.mu.Unlock()
	for _, id := range ids {
		p.pollJob(ctx, id)
	}
}

// pollJob records one status of a job; it returns the status (nil when
// the poll failed or the job is unknown).
func (p *pcluster) pollJob(ctx context.Context, id string) *api.JobStatus {
	st, _ := p.pollJobFound(ctx, id)
	return st
}

// pollJobFound is pollJob that also says whether the cluster knew the job
// (false only for a not-found answer).
func (p *pcluster) pollJobFound(ctx context.Context, id string) (*api.JobStatus, bool) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	st, err := p.client.Job(cctx, id)
	now := time.Now()
	var ae *api.Error
	switch {
	case errors.As(err, &ae) && ae.Code == api.CodeNotFound:
		p.hist.AddStatus(checker.Status{JobID: id, NotFound: true, At: now})
		return nil, false
	case err != nil:
		return nil, true
	}
	p.hist.AddStatus(checker.Status{JobID: id, Status: string(st.Status), Terminal: st.Status.Terminal(),
		Requests: st.TotalCompleted + st.TotalFailed, At: now})
	for _, d := range st.Datacenters {
		if d.FenceToken != 0 {
			p.hist.AddFence(checker.Fence{JobID: id, Datacenter: d.Name, Token: d.FenceToken, At: now})
		}
	}
	return st, true
}

// loadJob is an open-model http job: rate requests a second for duration
// against its own target, so the target's count is exactly this job's.
func loadJob(key, url string, rate int, duration string, dcs int) string {
	dc := ""
	if dcs > 0 {
		dc = fmt.Sprintf("datacenters: %d\n", dcs)
	}
	return fmt.Sprintf(`name: %s
timeout: 180s
%sworkflows:
  - name: load
    type: http
    cores: 1
    model: open
    rate: %d
    vus: 2
    max_vus: 20
    duration: %s
    steps:
      - {name: hit, method: GET, url: "%s/%s"}
`, key, dc, rate, duration, url, key)
}

// submitLoad starts a target for a new job, submits it, and records the
// answer. It returns the job id ("" unless the answer carried one). Safe
// to call from several goroutines.
func (p *pcluster) submitLoad(prefix string, rate int, duration string, dcs int) (string, checker.Answer) {
	key, url := p.newTarget(prefix)
	if url == "" {
		return "", checker.Unknown
	}
	return p.submitJob(key, []byte(loadJob(key, url, rate, duration, dcs)), nil)
}

// newTarget starts a target of its own for the next submission and
// returns the submission's key and the target's URL ("" on failure, which
// fails the test).
func (p *pcluster) newTarget(prefix string) (key, url string) {
	p.mu.Lock()
	p.seq++
	key = fmt.Sprintf("%s-%d", prefix, p.seq)
	p.mu.Unlock()
	cfg := target.DefaultConfig()
	cfg.Addr = p.net.HostIP() + ":0"
	tgt, err := target.New(cfg)
	if err == nil {
		err = tgt.Start(context.Background())
	}
	if err != nil {
		p.t.Errorf("target for %s: %v", key, err)
		return key, ""
	}
	p.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		tgt.Shutdown(ctx)
	})
	p.mu.Lock()
	p.targets[key] = tgt
	p.mu.Unlock()
	return key, "http://" + tgt.Addr()
}

// submitJob submits a job file (with data files, if any) and records the
// answer under key.
func (p *pcluster) submitJob(key string, job []byte, data map[string][]byte) (string, checker.Answer) {
	return p.submitVia(p.client, key, job, data)
}

// submitVia is submitJob through a given client (e.g. one that reaches only
// a node on the minority side of a cut).
func (p *pcluster) submitVia(client *api.Client, key string, job []byte, data map[string][]byte) (string, checker.Answer) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	at := time.Now()
	var id string
	var err error
	if data != nil {
		id, err = client.SubmitWithData(ctx, job, "job.yaml", data)
	} else {
		id, err = client.Submit(ctx, job, "job.yaml")
	}
	ans, detail := classify(err)
	p.hist.AddSubmit(checker.Submit{Key: key, JobID: id, Answer: ans, Detail: detail, At: at, Took: time.Since(at)})
	if id != "" {
		p.mu.Lock()
		p.jobs[id] = key
		p.mu.Unlock()
	}
	p.t.Logf("submit %s: %s %s %s (%s)", key, ans, id, detail, time.Since(at).Round(time.Millisecond))
	return id, ans
}

// submitLoadVia is submitLoad through only the API of node.
func (p *pcluster) submitLoadVia(node, prefix string, rate int, duration string, dcs int) (string, checker.Answer) {
	n, ok := p.Node(node)
	if !ok {
		p.t.Errorf("no node %s", node)
		return "", checker.Unknown
	}
	client, err := api.NewClient([]string{"http://" + n.API}, p.Token())
	if err != nil {
		p.t.Errorf("client for %s: %v", node, err)
		return "", checker.Unknown
	}
	defer client.Close()
	key, url := p.newTarget(prefix)
	if url == "" {
		return "", checker.Unknown
	}
	return p.submitVia(client, key, []byte(loadJob(key, url, rate, duration, dcs)), nil)
}

// classify turns a submit's error into the answer the client got. An
// answer that says the job will not run is a refusal; anything that does
// not say (a timeout, a dropped connection, an internal error) is unknown.
func classify(err error) (checker.Answer, string) {
	if err == nil {
		return checker.Acked, ""
	}
	var ae *api.Error
	if errors.As(err, &ae) {
		switch {
		case ae.Code == api.CodeInternal, ae.Code == api.CodeUnavailable, ae.Code == "outcome_unknown",
			ae.Status == http.StatusGatewayTimeout,
			// A refusal that itself says the outcome is unknown is not one.
			strings.Contains(ae.Message, "outcome unknown"), strings.Contains(ae.Message, "may run"):
			return checker.Unknown, err.Error()
		default:
			return checker.Refused, err.Error()
		}
	}
	return checker.Unknown, err.Error()
}

// recoverAfter submits small probe jobs until one is acknowledged and
// returns how long after since that was: the time to recover.
func (p *pcluster) recoverAfter(since time.Time, dcs int, within time.Duration) time.Duration {
	p.t.Helper()
	deadline := time.Now().Add(within)
	for {
		if _, ans := p.submitLoad("probe", 20, "1s", dcs); ans == checker.Acked {
			d := time.Since(since)
			p.t.Logf("recovered: first acknowledged submit %s after the fault", d.Round(10*time.Millisecond))
			return d
		}
		if time.Now().After(deadline) {
			p.t.Errorf("no submit acknowledged within %s of the fault", within)
			return -1
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// leaderOf waits until exactly one node of group says it leads, in a term
// above minTerm, and returns it.
func (p *pcluster) leaderOf(group string, minTerm uint64, within time.Duration) (string, uint64) {
	p.t.Helper()
	var name string
	var term uint64
	testutil.Eventually(p.t, within, 100*time.Millisecond, func() error {
		p.mu.Lock()
		defer p.mu.Unlock()
		name, term = "", 0
		for n, o := range p.latest {
			if o.group == group && o.leading && o.term > minTerm && time.Since(o.at) < 2*time.Second && o.term > term {
				name, term = n, o.term
			}
		}
		if name == "" {
			return fmt.Errorf("no node of %s leads in a term above %d", group, minTerm)
		}
		return nil
	})
	return name, term
}

// settledLeader waits until a node of group leads in the highest term any
// node of the group is in (no election under way) and returns it.
func (p *pcluster) settledLeader(group string, within time.Duration) (string, uint64) {
	p.t.Helper()
	var name string
	var term uint64
	testutil.Eventually(p.t, within, 100*time.Millisecond, func() error {
		p.mu.Lock()
		defer p.mu.Unlock()
		name, term = "", 0
		var top uint64
		for n, o := range p.latest {
			if o.group != group || time.Since(o.at) > 2*time.Second {
				continue
			}
			top = max(top, o.term)
			if o.leading && o.term > term {
				name, term = n, o.term
			}
		}
		if name == "" || term < top {
			return fmt.Errorf("%s: leader %q in term %d, a node is in term %d", group, name, term, top)
		}
		return nil
	})
	return name, term
}

// namesOf lists nodes by role and datacenter ("" for any).
func (p *pcluster) namesOf(role, dc string) []string {
	var out []string
	for _, n := range p.Nodes() {
		if (role == "" || n.Role == role) && (dc == "" || n.DC == dc) {
			out = append(out, n.Name)
		}
	}
	return out
}

func without(names []string, drop ...string) []string {
	return slices.DeleteFunc(slices.Clone(names), func(n string) bool { return slices.Contains(drop, n) })
}

// finish heals every cut, waits for every known job to end and every
// target to go quiet, records the targets' counts, and returns the
// checker's verdict (logged).
func (p *pcluster) finish(rules checker.Rules, within time.Duration) checker.Verdict {
	p.t.Helper()
	if err := p.net.Heal(); err != nil {
		p.t.Errorf("heal: %v", err)
	}
	deadline := time.Now().Add(within)
	for _, s := range p.hist.Submits() {
		if s.JobID == "" {
			continue
		}
		// A job the healed cluster still does not know after a while is
		// lost; waiting longer would only slow the verdict.
		var unknownSince time.Time
		for time.Now().Before(deadline) {
			st, found := p.pollJobFound(context.Background(), s.JobID)
			if st != nil && st.Status.Terminal() {
				break
			}
			switch {
			case found:
				unknownSince = time.Time{}
			case unknownSince.IsZero():
				unknownSince = time.Now()
			case time.Since(unknownSince) > 20*time.Second:
				p.t.Logf("job %s (%s): unknown to the cluster for 20 s after the heal", s.JobID, s.Key)
				deadline = time.Now() // stop waiting for the rest too: they had as long
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	// A job the cluster forgot may still be loading its target: wait for
	// every target to be quiet for a while before taking its count.
	p.mu.Lock()
	targets := make(map[string]*target.Server, len(p.targets))
	for k, v := range p.targets {
		targets[k] = v
	}
	p.mu.Unlock()
	prev := map[string]uint64{}
	quiet := 0
	for quiet < 8 && time.Now().Before(deadline.Add(30*time.Second)) {
		moved := false
		for k, tgt := range targets {
			s := tgt.Stats()
			if s.Requests != prev[k] || s.InFlight != 0 {
				moved = true
			}
			prev[k] = s.Requests
		}
		if moved {
			quiet = 0
		} else {
			quiet++
		}
		time.Sleep(250 * time.Millisecond)
	}
	for k, n := range prev {
		p.hist.SetTargetCount(k, n)
	}
	// The last statuses, after the targets went quiet.
	for _, s := range p.hist.Submits() {
		if s.JobID != "" {
			p.pollJob(context.Background(), s.JobID)
		}
	}
	p.stopObserving()
	v := p.hist.Check(rules)
	p.t.Logf("checker: %s", v)
	return v
}

// partitionReport prints a scenario's figures in one line.
func partitionReport(t *testing.T, scenario string, recover time.Duration, v checker.Verdict) {
	t.Logf("SCENARIO %s: recover %s; acked %d, refused %d, unknown %d, lost %d, duplicated %d, extra requests %d",
		scenario, recover.Round(10*time.Millisecond), v.Acked, v.Refused, v.Unknown, v.Lost, v.Duplicated, v.Extra)
	if os.Getenv("PARTITION_REPORT") != "" {
		f, err := os.OpenFile(os.Getenv("PARTITION_REPORT"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintf(f, "%s\trecover=%s\tacked=%d\trefused=%d\tunknown=%d\tlost=%d\tduplicated=%d\textra=%d\tverdict=%v\n",
				scenario, recover.Round(10*time.Millisecond), v.Acked, v.Refused, v.Unknown, v.Lost, v.Duplicated, v.Extra, v.OK())
			f.Close()
		}
	}
}
