package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
)

// maxResponseBytes caps what the client reads from one answer; results of a
// big job are the largest, far below this.
const maxResponseBytes = 64 << 20

// Client talks to the API of one cluster through several endpoints (gates or
// managers). A call goes to the endpoint that answered last, and moves on to
// the next when one cannot be reached, so losing a node costs one failed
// connection rather than the call. It is safe for concurrent use.
type Client struct {
	endpoints []string
	token     string
	hc        *http.Client
	// first is the index of the endpoint to try first: the last that
	// answered.
	first atomic.Int64

	requestTimeout time.Duration
	leaderWait     time.Duration
	streamIdle     time.Duration
	watchGiveUp    time.Duration
	backoffMin     time.Duration
	backoffMax     time.Duration
	now            func() time.Time
}

// ClientOption adjusts a Client.
type ClientOption func(*Client)

// WithHTTPClient uses hc (its Transport, Jar...) instead of a private
// client. Its Timeout should be zero, since event streams are long; the
// client bounds other calls itself (WithRequestTimeout). Its CheckRedirect is
// replaced, so redirects to the leader keep the bearer token.
func WithHTTPClient(hc *http.Client) ClientOption {
	return func(c *Client) {
		cp := *hc
		c.hc = &cp
	}
}

// WithTLSConfig sets the TLS config for https endpoints (a private CA, say).
func WithTLSConfig(cfg *tls.Config) ClientOption {
	return func(c *Client) {
		if tr, ok := c.hc.Transport.(*http.Transport); ok {
			tr.TLSClientConfig = cfg.Clone()
		}
	}
}

// WithRequestTimeout bounds each attempt of a call other than Watch
// (default 30 s).
func WithRequestTimeout(d time.Duration) ClientOption {
	return func(c *Client) { c.requestTimeout = d }
}

// WithLeaderWait is how long a call keeps going round the endpoints while
// every one answers that it knows no leader (an election is under way),
// before it returns that answer (default 1 s, about an election with the
// faster profiles; zero returns it after one round). Nodes answer no_leader
// at once, so the wait is the client's, and a caller that counts a prompt
// answer (a refusal within a couple of seconds) still gets one.
func WithLeaderWait(d time.Duration) ClientOption {
	return func(c *Client) { c.leaderWait = d }
}

// WithStreamIdleTimeout is how long Watch waits for any byte, heartbeats
// included, before it takes a stream for dead and reconnects (default 45 s,
// three server heartbeats). It is what detects a node that vanished without
// closing its connections.
func WithStreamIdleTimeout(d time.Duration) ClientOption {
	return func(c *Client) { c.streamIdle = d }
}

// WithWatchGiveUp is how long Watch keeps reconnecting while no endpoint
// serves the stream (default 60 s), and the backoff between rounds.
func WithWatchGiveUp(giveUp, backoffMin, backoffMax time.Duration) ClientOption {
	return func(c *Client) {
		c.watchGiveUp, c.backoffMin, c.backoffMax = giveUp, backoffMin, backoffMax
	}
}

// NewClient builds a client for the given base URLs ("http://host:port";
// a bare "host:port" means http), tried in order.
func NewClient(baseURLs []string, token string, opts ...ClientOption) (*Client, error) {
	var endpoints []string
	seen := make(map[string]bool)
	for _, raw := range baseURLs {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		ep, err := normalizeEndpoint(raw)
		if err != nil {
			return nil, err
		}
		if !seen[ep] {
			seen[ep] = true
			endpoints = append(endpoints, ep)
		}
	}
	if len(endpoints) == 0 {
		return nil, errors.New("api client: no endpoint given")
	}
	if token == "" {
		return nil, errors.New("api client: no token given")
	}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   5 * time.Second,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	c := &Client{
		endpoints:      endpoints,
		token:          token,
		hc:             &http.Client{Transport: tr},
		requestTimeout: 30 * time.Second,
		leaderWait:     time.Second,
		streamIdle:     45 * time.Second,
		watchGiveUp:    time.Minute,
		backoffMin:     200 * time.Millisecond,
		backoffMax:     5 * time.Second,
		now:            time.Now,
	}
	for _, o := range opts {
		o(c)
	}
	c.hc.CheckRedirect = c.checkRedirect
	return c, nil
}

func normalizeEndpoint(raw string) (string, error) {
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("api client: endpoint %q: %w", raw, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("api client: endpoint %q: want http(s)://host:port", raw)
	}
	return strings.TrimSuffix(u.Scheme+"://"+u.Host+u.Path, "/"), nil
}

// Endpoints lists the base URLs in the order given.
func (c *Client) Endpoints() []string { return append([]string(nil), c.endpoints...) }

// Close releases idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// checkRedirect follows a not-leader 307 to the leader with the token: Go
// drops Authorization on a redirect to another host, and the leader is one.
// It never downgrades https to http, which would expose the token.
func (c *Client) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 5 {
		return errors.New("stopped after 5 redirects")
	}
	if via[0].URL.Scheme == "https" && req.URL.Scheme != "https" {
		return fmt.Errorf("refusing redirect from %s to %s: it would send the token in clear", via[0].URL, req.URL)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	return nil
}

// UnreachableError says no endpoint could be reached.
type UnreachableError struct {
	Endpoints []string
	Err       error // the last endpoint's error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cannot reach the Tempest API at %s: %v", strings.Join(e.Endpoints, ", "), rootCause(e.Err))
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// rootCause shortens net/http's "Get \"http://...\": dial tcp ...: connect:
// connection refused" to its useful end for one-line messages.
func rootCause(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		err = op.Err
	}
	var sys *os.SyscallError
	if errors.As(err, &sys) && sys.Err != nil {
		err = sys.Err
	}
	return err
}

// request is one API call, re-sendable to any endpoint.
type request struct {
	method string
	path   string // escaped
	query  url.Values
	body   []byte
	header http.Header
	// idempotent calls may be re-sent after an error that leaves unknown
	// whether the first attempt ran; a submit must not be.
	idempotent bool
}

// answer is an HTTP answer that ended the search for an endpoint.
type answer struct {
	status   int
	header   http.Header
	body     []byte
	endpoint string
}

// exchange sends req to the endpoints in turn, starting with the last that
// answered, until one gives an answer that is not a reason to try the next;
// while every endpoint answers that it knows no leader, it goes round them
// again for up to leaderWait.
func (c *Client) exchange(ctx context.Context, req request) (*answer, error) {
	var giveUp time.Time
	wait := 50 * time.Millisecond
	var unsure error
	for {
		a, err := c.exchangeRound(ctx, req, &unsure)
		var apiErr *Error
		if !errors.As(err, &apiErr) || apiErr.Code != CodeNoLeader {
			return a, err
		}
		// Every endpoint knows no leader. An election usually names one
		// within a second; a partition may keep it from doing so for
		// minutes, so the wait is bounded and the answer then returned.
		if giveUp.IsZero() {
			giveUp = time.Now().Add(c.leaderWait)
		}
		// The node's Retry-After is in whole seconds; the client polls
		// more finely, since asking a node that knows no leader is cheap.
		if time.Now().Add(wait).After(giveUp) {
			return nil, apiErr
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, apiErr
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// exchangeRound is one round of exchange: each endpoint once at most.
// unsure keeps, across rounds, the first attempt of a request with effects
// whose outcome is unknown (an answer lost in flight, a 502, an
// outcome_unknown); when the other endpoints then only say "not here",
// the call ends with that attempt's error rather than their refusal: a
// submission a leader may still store must not be reported refused.
func (c *Client) exchangeRound(ctx context.Context, req request, unsure *error) (*answer, error) {
	effects := req.method != http.MethodGet && req.method != http.MethodHead
	n := len(c.endpoints)
	start := int(c.first.Load())
	var lastErr error
	var lastAnswer *Error
	for i := range n {
		idx := (start + i) % n
		ep := c.endpoints[idx]
		a, err := c.attempt(ctx, ep, req, n-i)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			lastErr = err
			if effects && !isDialError(err) && *unsure == nil {
				*unsure = fmt.Errorf("%s %s at %s (it may or may not have run): %w", req.method, req.path, ep, err)
			}
			if req.idempotent || isDialError(err) {
				continue
			}
			return nil, fmt.Errorf("%s %s at %s (it may or may not have run): %w", req.method, req.path, ep, err)
		}
		if a.status < 300 {
			c.first.Store(int64(idx))
			return a, nil
		}
		apiErr := decodeError(a)
		if failoverAnswer(apiErr, req.idempotent) {
			if effects && *unsure == nil && (apiErr.Status == http.StatusBadGateway || apiErr.Code == CodeOutcomeUnknown) {
				*unsure = apiErr
			}
			lastAnswer = apiErr
			continue
		}
		return nil, apiErr
	}
	if *unsure != nil {
		return nil, *unsure
	}
	if lastAnswer != nil {
		return nil, lastAnswer
	}
	return nil, &UnreachableError{Endpoints: c.Endpoints(), Err: lastErr}
}

// attempt sends req to ep. left counts the endpoints still to try, ep
// included: a request that may be re-sent elsewhere gets at most its share
// of what is left of ctx's deadline, so an endpoint that holds it without
// an answer (a paused node accepts connections; a follower may forward to
// a leader that does) leaves time for the others. Without the share a
// client whose last good endpoint was paused gave every call's whole
// deadline to that endpoint, and its submissions ended unknown.
func (c *Client) attempt(ctx context.Context, ep string, req request, left int) (*answer, error) {
	timeout := c.requestTimeout
	if dl, ok := ctx.Deadline(); ok && req.idempotent && left > 1 {
		timeout = min(timeout, time.Until(dl)/time.Duration(left))
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hreq, err := c.newRequest(actx, ep, req)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(hreq)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read answer from %s: %w", ep, err)
	}
	if len(body) > maxResponseBytes {
		return nil, fmt.Errorf("answer from %s larger than %d bytes", ep, maxResponseBytes)
	}
	return &answer{status: resp.StatusCode, header: resp.Header, body: body, endpoint: ep}, nil
}

func (c *Client) newRequest(ctx context.Context, ep string, req request) (*http.Request, error) {
	u := ep + req.path
	if len(req.query) > 0 {
		u += "?" + req.query.Encode()
	}
	var body io.Reader
	if req.body != nil {
		body = bytes.NewReader(req.body) // also sets GetBody, so a 307 re-sends it
	}
	hreq, err := http.NewRequestWithContext(ctx, req.method, u, body)
	if err != nil {
		return nil, fmt.Errorf("build request %s %s: %w", req.method, u, err)
	}
	for k, vs := range req.header {
		hreq.Header[k] = vs
	}
	hreq.Header.Set("Authorization", "Bearer "+c.token)
	if hreq.Header.Get("Accept") == "" {
		hreq.Header.Set("Accept", "application/json")
	}
	return hreq, nil
}

// failoverAnswer reports whether an error answer means "ask another node":
// this node knows no leader, is shutting down, or could not reach the
// leader. Those 503s promise the request did not run, so even a submit may
// go elsewhere; a 502 makes no such promise.
func failoverAnswer(e *Error, idempotent bool) bool {
	switch e.Status {
	case http.StatusServiceUnavailable:
		// outcome_unknown promises nothing, but a request that names itself
		// (an idempotency key) finds its first copy wherever it is re-sent.
		return e.Code == CodeNoLeader || e.Code == CodeNotLeader || e.Code == CodeUnavailable ||
			e.Code == CodeOutcomeUnknown && idempotent
	case http.StatusBadGateway:
		return idempotent
	}
	return false
}

// isDialError reports whether err happened before a request left: then it
// certainly did not run, and any call may be re-sent.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// decodeError turns an error answer into *Error, whatever its body.
func decodeError(a *answer) *Error {
	e := &Error{Status: a.status, Endpoint: a.endpoint, RetryAfter: parseRetryAfter(a.header.Get("Retry-After"))}
	var body ErrorBody
	if err := json.Unmarshal(a.body, &body); err == nil && (body.Code != "" || body.Error != "") {
		e.Code, e.Message, e.Problems, e.Leader, e.Have = body.Code, body.Error, body.Problems, body.Leader, body.Have
		return e
	}
	// Not ours: a proxy or a foreign server. Keep a bounded, printable
	// excerpt so the message stays one readable line.
	msg := strings.TrimSpace(strings.ToValidUTF8(string(a.body[:min(len(a.body), 200)]), ""))
	msg = strings.Join(strings.Fields(msg), " ")
	if msg == "" {
		msg = http.StatusText(a.status)
	}
	e.Message = fmt.Sprintf("%s answered %d: %s", a.endpoint, a.status, msg)
	return e
}

func (c *Client) getJSON(ctx context.Context, path string, query url.Values, v any) error {
	a, err := c.exchange(ctx, request{method: http.MethodGet, path: path, query: query, idempotent: true})
	if err != nil {
		return err
	}
	return decodeAnswer(a, v)
}

func decodeAnswer(a *answer, v any) error {
	if err := json.Unmarshal(a.body, v); err != nil {
		return fmt.Errorf("decode answer from %s: %w", a.endpoint, err)
	}
	return nil
}

// Submit sends a job file (YAML or JSON) and returns the job id. filename
// only labels problems in a 400 answer (*Error with Problems).
func (c *Client) Submit(ctx context.Context, jobFile []byte, filename string) (string, error) {
	return c.SubmitWithData(ctx, jobFile, filename, nil)
}

// SubmitWithData is Submit for a job file that names data files: data maps
// each name as the job file writes it to the file's content (what
// jobfile.Parse read through WithDataFiles), and travels with the job file
// in one multipart request (FormJobFile).
func (c *Client) SubmitWithData(ctx context.Context, jobFile []byte, filename string, data map[string][]byte) (string, error) {
	return c.SubmitWithBlobs(ctx, jobFile, filename, data, nil, SubmitVars{})
}

// SubmitWithBlobs is SubmitWithData where some files the job names are
// already uploaded as blobs (UploadBlob, streamed): uploaded maps their
// names to the blobs' hex SHA-256.
func (c *Client) SubmitWithBlobs(ctx context.Context, jobFile []byte, filename string, data map[string][]byte, uploaded map[string]string, vars SubmitVars) (string, error) {
	h := http.Header{}
	h.Set("Content-Type", "application/yaml")
	if strings.HasSuffix(strings.ToLower(filename), ".json") {
		h.Set("Content-Type", "application/json")
	}
	if filename != "" {
		h.Set(FilenameHeader, filepath.Base(filename))
	}
	if jobFile == nil {
		jobFile = []byte{}
	}
	if len(data) > 0 || len(uploaded) > 0 || len(vars.Env) > 0 || len(vars.Secrets) > 0 || len(vars.TLSFiles) > 0 {
		// Data files go first, as blobs the cluster stores once for every
		// shard; a node that stores no blobs (a gate) gets the bytes inline.
		blobs, err := c.uploadDataFiles(ctx, data)
		switch {
		case err == nil:
			data = nil
		case isUnsupported(err):
			blobs = nil
		default:
			return "", fmt.Errorf("submit: %w", err)
		}
		for name, sum := range uploaded {
			if blobs == nil {
				blobs = map[string]string{}
			}
			blobs[name] = sum
		}
		body, contentType, err := encodeBundleBlobs(jobFile, filepath.Base(filename), data, blobs, vars)
		if err != nil {
			return "", fmt.Errorf("submit: %w", err)
		}
		jobFile = body
		h.Set("Content-Type", contentType)
	}
	// The key names the job before it exists, so a submission whose answer
	// was lost (a node killed mid-request) can be re-sent anywhere: the
	// cluster answers the second copy with the job the first one made.
	key, err := newIdempotencyKey()
	if err != nil {
		return "", err
	}
	h.Set(IdempotencyHeader, key)
	a, err := c.submitUnderKey(ctx, request{method: http.MethodPost, path: "/v1/jobs", body: jobFile, header: h, idempotent: true}, key)
	if err != nil {
		return "", err
	}
	var resp SubmitResponse
	if err := decodeAnswer(a, &resp); err != nil {
		return "", err
	}
	if resp.JobID == "" {
		return "", fmt.Errorf("submit: %s answered without a job id", a.endpoint)
	}
	return resp.JobID, nil
}

// unknownOutcomeRetries is how many times a submission answered
// outcome_unknown is re-sent (same key, so never a second job) before the
// client gives the answer to its caller.
const unknownOutcomeRetries = 3

// submitUnderKey sends a submission, re-sending it under the same key while
// the cluster answers that it cannot tell whether it stored it. If that
// answer stays, the error says plainly that the job may still run and how
// to find it: re-submitting the file would make a second job.
//
// Once an attempt was answered outcome_unknown, a later attempt that only
// finds no node to ask (no leader, unavailable, unreachable) says nothing
// about the first copy, which a majority may still come to hold: the call
// ends outcome unknown, never with that later refusal. The chaos checker
// caught the client reporting no_leader for a job that then ran.
func (c *Client) submitUnderKey(ctx context.Context, req request, key string) (*answer, error) {
	wait := 500 * time.Millisecond
	id := "j-" + key
	var unknown *Error
	mayRun := func(e *Error) *Error {
		e.Message = fmt.Sprintf("the cluster could not confirm whether it stored job %s, and it may still run: "+
			"`tempest status %s` shows it if it does (submitting the file again would make a second job): %s", id, id, e.Message)
		return e
	}
	for attempt := 0; ; attempt++ {
		a, err := c.exchange(ctx, req)
		var apiErr *Error
		isAPI := errors.As(err, &apiErr)
		switch {
		case err == nil:
			return a, nil
		case isAPI && apiErr.Code == CodeOutcomeUnknown:
			unknown = apiErr
		case unknown != nil && (!isAPI || failoverAnswer(apiErr, true)):
			return nil, mayRun(unknown)
		default:
			return a, err
		}
		if attempt >= unknownOutcomeRetries {
			return nil, mayRun(unknown)
		}
		t := time.NewTimer(max(wait, unknown.RetryAfter))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, mayRun(unknown)
		}
		wait *= 2
	}
}

func newIdempotencyKey() (string, error) {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("submit: idempotency key: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// Jobs lists the jobs the cluster knows, newest first.
func (c *Client) Jobs(ctx context.Context) ([]JobStatus, error) {
	var list JobList
	if err := c.getJSON(ctx, "/v1/jobs", nil, &list); err != nil {
		return nil, err
	}
	return list.Jobs, nil
}

// Job returns one job's status.
func (c *Client) Job(ctx context.Context, id string) (*JobStatus, error) {
	var st JobStatus
	if err := c.getJSON(ctx, jobPath(id, ""), nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Cancel stops a job; reason is recorded with it (may be empty).
func (c *Client) Cancel(ctx context.Context, id, reason string) (*CancelResponse, error) {
	body, err := json.Marshal(CancelRequest{Reason: reason})
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	a, err := c.exchange(ctx, request{method: http.MethodPost, path: jobPath(id, "/cancel"), body: body,
		header: h, idempotent: true})
	if err != nil {
		return nil, err
	}
	var resp CancelResponse
	if err := decodeAnswer(a, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Results downloads a job's results as "json", "csv" or "html" (the
// self-contained report page), verbatim.
func (c *Client) Results(ctx context.Context, id, format string) ([]byte, error) {
	if format == "" {
		format = "json"
	}
	if format != "json" && format != "csv" && format != "html" {
		return nil, fmt.Errorf("results format %q: want json, csv or html", format)
	}
	a, err := c.exchange(ctx, request{method: http.MethodGet, path: jobPath(id, "/results"),
		query: url.Values{"format": {format}}, idempotent: true})
	if err != nil {
		return nil, err
	}
	return a.body, nil
}

// JobResults downloads a job's results, decoded.
func (c *Client) JobResults(ctx context.Context, id string) (*Results, error) {
	var res Results
	if err := c.getJSON(ctx, jobPath(id, "/results"), nil, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Cluster describes the nodes the answering node knows.
func (c *Client) Cluster(ctx context.Context) (*ClusterView, error) {
	var v ClusterView
	if err := c.getJSON(ctx, "/v1/cluster", nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// Health asks the first reachable endpoint how it is.
func (c *Client) Health(ctx context.Context) (*Health, error) {
	var h Health
	if err := c.getJSON(ctx, "/healthz", nil, &h); err != nil {
		return nil, err
	}
	return &h, nil
}

func jobPath(id, suffix string) string {
	return "/v1/jobs/" + url.PathEscape(id) + suffix
}
