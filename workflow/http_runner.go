package workflow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// defaultUserAgent names the load so a target's operator can tell it apart
// from real users; a step's own User-Agent header wins.
const defaultUserAgent = "tempest-loadgen/1"

type httpRunner struct {
	name    string
	params  *HTTPParams
	steps   []preparedStep
	timeout time.Duration
	exec    executor
	client  *http.Client
}

// preparedStep is an HTTPStep turned into what each request needs, once.
type preparedStep struct {
	name   string
	method string
	url    string
	// header is shared, read-only, by every request of the step: net/http
	// does not modify a request's headers (RoundTripper's contract, and
	// Client copies the request before adding any), which saves a map clone
	// per request.
	header http.Header
	host   string // a Host header, which net/http takes from Request.Host
	body   string
	expect []int // nil: any 2xx or 3xx
}

func (st *preparedStep) expects(code int) bool {
	if st.expect == nil {
		return code >= 200 && code < 400
	}
	return slices.Contains(st.expect, code)
}

func newHTTPRunner(name string, p *HTTPParams) (*httpRunner, error) {
	r := &httpRunner{name: name, params: p, timeout: p.Timeout, exec: newExecutor(p)}
	if r.timeout == 0 {
		r.timeout = DefaultRequestTimeout
	}
	for _, s := range p.Steps {
		st := preparedStep{name: s.Name, method: s.Method, url: s.URL, body: s.Body, header: http.Header{}}
		if st.method == "" {
			st.method = http.MethodGet
		}
		if len(s.ExpectStatus) > 0 {
			st.expect = slices.Clone(s.ExpectStatus)
		}
		// Sorted so that two spellings of one header ("x-a" and "X-A") are
		// sent in the same order every run.
		keys := make([]string, 0, len(s.Headers))
		for k := range s.Headers {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if http.CanonicalHeaderKey(k) == "Host" {
				st.host = s.Headers[k]
				continue
			}
			st.header.Add(k, s.Headers[k])
		}
		if st.header.Get("User-Agent") == "" {
			st.header.Set("User-Agent", defaultUserAgent)
		}
		// Validate checked the URL; building one request now catches what
		// it could not, before any VU starts.
		if _, err := http.NewRequest(st.method, st.url, nil); err != nil {
			return nil, fmt.Errorf("step %q: %w", s.Name, err)
		}
		r.steps = append(r.steps, st)
	}
	r.client = &http.Client{
		Transport: newLoadTransport(r.exec.maxVUs()),
		// One step is one request: a redirect is an outcome to count (3xx is
		// a success by default), not something to chase, which would also
		// make the target's request count differ from ours.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return r, nil
}

// newLoadTransport tunes net/http for generating load rather than for a
// typical client:
//   - one idle connection kept per VU, so a closed-model VU reuses its
//     connection instead of dialling (and exhausting ports) per request;
//   - Proxy nil: a stray HTTP_PROXY in a worker's environment must not send
//     the load to a proxy instead of the target;
//   - no transparent gzip: requests are exactly what the job file says and
//     decompression is not part of what is measured;
//   - HTTP/1.1 only: one connection per VU is the closed model's premise;
//     HTTP/2 and HTTP/3 come as explicit options with the load-test issue.
//
// Timeouts live in each request's context (dial, TLS, headers and body all
// under the step's timeout). The load-test issue will measure this path and
// likely replace it with a leaner HTTP/1.1 client: net/http allocates per
// request and runs two goroutines per connection, fine for correctness and
// moderate rates, less so for a million requests a second.
func newLoadTransport(vus int) *http.Transport {
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	return &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0, // bounded per host below
		MaxIdleConnsPerHost: vus,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		Protocols:           protocols,
	}
}

// Run drives the executor. Concurrency: each VU is a goroutine. VUs spend
// their time waiting on the network, so they are not bounded by the
// workflow's cores (a semaphore per core would only cap concurrency, which
// is the job file's vus); the Go scheduler already runs at most GOMAXPROCS
// of them at once. What the cores do size is the stats recorder's shards,
// the part every VU contends on. CPU-heavy per-request work that arrives
// later (templating, checks) is where a per-core pool would belong.
func (r *httpRunner) Run(ctx context.Context, env Env) (Result, error) {
	env = env.withDefaults()
	log := env.Logger.With("workflow", r.name, "workflow_type", "http")
	names := make([]string, len(r.steps))
	for i, st := range r.steps {
		names[i] = st.name
	}
	rec := newRecorder(names, env.parallelism())
	start := env.Now()
	rep := startReporter(env, func() Snapshot { return rec.snapshot(env.Now().Sub(start)) })
	log.Info("http workflow starting", "vus", r.params.VUs, "duration", r.params.Duration,
		"iterations", r.params.Iterations, "steps", len(r.steps), "cores", len(env.Cores), "shards", len(rec.shards))

	var logged sync.Map // (step, class) -> true: log each kind of failure once
	r.exec.run(ctx, func(ctx context.Context, vu int, stopping <-chan struct{}) {
		shard := rec.shard(vu)
		for i := range r.steps {
			if ctx.Err() != nil {
				return
			}
			select {
			case <-stopping:
				return
			default:
			}
			o, err := r.do(ctx, &r.steps[i], env.Now)
			shard.record(i, o)
			if o.failed {
				type key struct {
					step  int
					class ErrorClass
				}
				if _, seen := logged.LoadOrStore(key{i, o.class}, true); !seen {
					log.Warn("http step failed; further failures of this class are counted, not logged",
						"step", r.steps[i].name, "class", o.class, "err", err)
				}
			}
		}
	})
	var stopErr error
	if ctx.Err() != nil {
		stopErr = stopCause(ctx)
	}
	rep.stop()
	// Every response body is closed by now, so each connection is idle or
	// on its way there; CloseIdleConnections also makes the transport close
	// connections that become idle after it, so no read or write loop
	// goroutine outlives the run.
	r.client.CloseIdleConnections()

	final := rec.snapshot(env.Now().Sub(start))
	if env.Report != nil {
		env.Report(final)
	}
	log.Info("http workflow finished", "completed", final.Completed, "failed", final.Failed,
		"elapsed", final.Elapsed, "stopped_early", stopErr != nil)
	if stopErr != nil {
		return Result{final}, fmt.Errorf("http workflow stopped early: %w", stopErr)
	}
	return Result{final}, nil
}

// do sends one request and classifies it. Counting rule: every call counts
// exactly once, as completed (expected status) or failed. A request aborted
// because the run was cancelled counts as failed, class cancelled, whether
// or not it reached the target; so after a cancel, the target's count is
// between ours minus the VUs that were mid-request, and ours.
func (r *httpRunner) do(ctx context.Context, st *preparedStep, now func() time.Time) (outcome, error) {
	reqCtx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	var body io.Reader
	if st.body != "" {
		body = strings.NewReader(st.body)
	}
	req, err := http.NewRequestWithContext(reqCtx, st.method, st.url, body)
	if err != nil {
		// newHTTPRunner built this request once already; count, don't hide.
		return outcome{failed: true, class: ErrorTransport}, err
	}
	req.Header = st.header
	if st.host != "" {
		req.Host = st.host
	}
	started := now()
	resp, err := r.client.Do(req)
	if err != nil {
		return outcome{failed: true, class: classify(ctx, reqCtx, err)}, err
	}
	// Drain the body so the connection goes back to the pool for the VU's
	// next request; the step's timeout bounds a slow or endless body.
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	latency := now().Sub(started)
	if err != nil {
		class := classify(ctx, reqCtx, err)
		if class == ErrorTransport || class == ErrorConnect {
			class = ErrorBody
		}
		return outcome{failed: true, class: class}, err
	}
	if !st.expects(resp.StatusCode) {
		return outcome{failed: true, class: ErrorStatus, latency: latency, timed: true},
			fmt.Errorf("%s %s: unexpected status %d", st.method, st.url, resp.StatusCode)
	}
	return outcome{latency: latency, timed: true}, nil
}

func classify(ctx, reqCtx context.Context, err error) ErrorClass {
	if ctx.Err() != nil {
		return ErrorCancelled
	}
	if errors.Is(reqCtx.Err(), context.DeadlineExceeded) {
		return ErrorTimeout
	}
	var dnsErr *net.DNSError
	var opErr *net.OpError
	if errors.As(err, &dnsErr) || errors.As(err, &opErr) && opErr.Op == "dial" {
		return ErrorConnect
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return ErrorTimeout
	}
	return ErrorTransport
}
