package api_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tempest/api"
	"tempest/api/apitest"
	"tempest/internal/testutil"
	"tempest/wire"
)

func deadURL(t *testing.T) string {
	return fmt.Sprintf("http://127.0.0.1:%d", testutil.FreeTCPPort(t))
}

func TestNewClient(t *testing.T) {
	tests := []struct {
		name    string
		urls    []string
		token   string
		want    []string
		wantErr string
	}{
		{"plain", []string{"http://a:1"}, "t", []string{"http://a:1"}, ""},
		{"bare host:port and trailing slash", []string{"a:1", "https://b:2/"}, "t", []string{"http://a:1", "https://b:2"}, ""},
		{"blanks and duplicates dropped", []string{" ", "a:1", "http://a:1"}, "t", []string{"http://a:1"}, ""},
		{"none", []string{"", " "}, "t", nil, "no endpoint"},
		{"bad scheme", []string{"ftp://a:1"}, "t", nil, "want http(s)"},
		{"query", []string{"http://a:1/?x=1"}, "t", nil, "want http(s)"},
		{"no token", []string{"a:1"}, "", nil, "no token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := api.NewClient(tt.urls, tt.token)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if got := c.Endpoints(); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("endpoints %v, want %v", got, tt.want)
			}
		})
	}
}

func TestClientFailover(t *testing.T) {
	b := apitest.NewBackend()
	srv := apitest.Serve(t, b, nil)
	c := newClient(t, deadURL(t), srv.URL())
	ctx := context.Background()

	// A submit fails over too when the dead endpoint refused the connection:
	// the request never left, so it cannot run twice.
	id, err := c.Submit(ctx, []byte(goodJob), "smoke.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(b.Submissions()); n != 1 {
		t.Fatalf("%d submissions, want 1", n)
	}
	for _, call := range []struct {
		name string
		f    func() error
	}{
		{"Job", func() error { _, err := c.Job(ctx, id); return err }},
		{"Jobs", func() error { _, err := c.Jobs(ctx); return err }},
		{"Cluster", func() error { _, err := c.Cluster(ctx); return err }},
		{"Health", func() error { _, err := c.Health(ctx); return err }},
		{"Results", func() error { _, err := c.Results(ctx, id, "csv"); return err }},
		{"JobResults", func() error { _, err := c.JobResults(ctx, id); return err }},
		{"Cancel", func() error { _, err := c.Cancel(ctx, id, "test"); return err }},
	} {
		if err := call.f(); err != nil {
			t.Errorf("%s with the first endpoint dead: %v", call.name, err)
		}
	}
}

// An endpoint that accepts the request and never answers (a paused node)
// takes only its share of the call's deadline: the submission is answered
// by the next endpoint, under the same idempotency key, before the
// caller's deadline, and the next call starts where the answer came from.
func TestSubmitFailsOverFromAnEndpointThatHoldsIt(t *testing.T) {
	held := make(chan struct{})
	var hits atomic.Int32
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		select {
		case <-r.Context().Done():
		case <-held:
		}
	}))
	t.Cleanup(stuck.Close)
	t.Cleanup(func() { close(held) })
	b := apitest.NewBackend()
	srv := apitest.Serve(t, b, nil)
	c := newClient(t, stuck.URL, srv.URL())
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		start := time.Now()
		_, err := c.Submit(ctx, []byte(goodJob), "j.yaml")
		cancel()
		if err != nil {
			t.Fatalf("submit %d: %v (after %s)", i, err, time.Since(start).Round(time.Millisecond))
		}
	}
	if n := len(b.Submissions()); n != 2 {
		t.Fatalf("%d submissions reached the answering endpoint, want 2", n)
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("the endpoint that holds requests got %d, want 1 (the second submit should start at the one that answered)", n)
	}
}

func TestClientUnreachable(t *testing.T) {
	dead1, dead2 := deadURL(t), deadURL(t)
	c := newClient(t, dead1, dead2)
	_, err := c.Jobs(context.Background())
	var ue *api.UnreachableError
	if !errors.As(err, &ue) {
		t.Fatalf("err %T %v, want *UnreachableError", err, err)
	}
	msg := err.Error()
	if !strings.Contains(msg, dead1) || !strings.Contains(msg, dead2) || !strings.Contains(msg, "refused") {
		t.Errorf("message %q should name both endpoints and the cause", msg)
	}
}

func TestClientFailoverOnNoLeader(t *testing.T) {
	lost := apitest.NewBackend()
	lost.SetLeader(false, "")
	follower := apitest.Serve(t, lost, shortLeaderWait)
	good := apitest.NewBackend()
	leader := apitest.Serve(t, good, nil)
	c := newClient(t, follower.URL(), leader.URL())
	if _, err := c.Submit(context.Background(), []byte(goodJob), "j.yaml"); err != nil {
		t.Fatalf("submit: %v", err)
	}
	if len(good.Submissions()) != 1 {
		t.Fatal("leader did not get the job")
	}
}

func TestClientTypedErrors(t *testing.T) {
	b := apitest.NewBackend()
	srv := apitest.Serve(t, b, nil)
	c := newClient(t, srv.URL())
	ctx := context.Background()

	_, err := c.Job(ctx, "nope")
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.Status != 404 || apiErr.Code != api.CodeNotFound || apiErr.Endpoint != srv.URL() {
		t.Errorf("unknown job: %#v", err)
	}

	_, err = c.Submit(ctx, []byte("name: x\nworkflows:\n  - {name: a, type: sleep}\n"), "x.yaml")
	if !errors.As(err, &apiErr) || apiErr.Code != api.CodeMalformed || len(apiErr.Problems) != 1 || apiErr.Problems[0].Line != 3 {
		t.Fatalf("bad job file: %#v", err)
	}
	if !strings.Contains(err.Error(), "workflows[0].duration") {
		t.Errorf("message %q does not carry the problem", err)
	}

	b.SetError("Submit", wire.Errorf(wire.CodeNoQuorum, "no quorum: 1 of 3 managers confirmed"))
	_, err = c.Submit(ctx, []byte(goodJob), "x.yaml")
	if !errors.As(err, &apiErr) || apiErr.Status != 503 || apiErr.Code != api.CodeNoQuorum {
		t.Errorf("no quorum: %#v", err)
	}

	bad, err := api.NewClient([]string{srv.URL()}, "wrong")
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	_, err = bad.Jobs(ctx)
	if !errors.As(err, &apiErr) || apiErr.Status != 401 || apiErr.Code != api.CodeUnauthenticated {
		t.Errorf("wrong token: %#v", err)
	}
	if _, err := c.Results(ctx, "x", "xml"); err == nil {
		t.Error("Results accepted format xml")
	}
}

// statusLog collects what Watch delivers.
type statusLog struct {
	mu  sync.Mutex
	all []api.JobStatus
}

func (l *statusLog) add(st api.JobStatus) {
	l.mu.Lock()
	l.all = append(l.all, st)
	l.mu.Unlock()
}

func (l *statusLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.all)
}

func (l *statusLog) last() api.JobStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.all) == 0 {
		return api.JobStatus{}
	}
	return l.all[len(l.all)-1]
}

// Watch survives the endpoint it streams from going away: it resumes on
// the next one and still sees the terminal status.
func TestWatchSurvivesEndpointLoss(t *testing.T) {
	b := apitest.NewBackend() // both nodes serve one backend, as two gates would
	b.AddJob(runningJob("j1"))
	first := apitest.Serve(t, b, nil)
	second := apitest.Serve(t, b, nil)
	c, err := api.NewClient([]string{first.URL(), second.URL()}, apitest.Token,
		api.WithWatchGiveUp(10*time.Second, 10*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	var log statusLog
	done := make(chan error, 1)
	go func() { done <- c.Watch(context.Background(), "j1", log.add) }()
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if log.len() == 0 {
			return errors.New("no status yet")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := first.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// Resumed on the second node: its stream is the only watcher left.
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if n := log.len(); n < 2 {
			return fmt.Errorf("%d statuses, want the resumed stream's first", n)
		}
		return nil
	})
	b.Update("j1", func(st *api.JobStatus) { st.TotalCompleted = 42 })
	b.Finish("j1", wire.JobCompleted)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Watch: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not end at the terminal status")
	}
	if st := log.last(); st.Status != wire.JobCompleted || st.TotalCompleted != 42 {
		t.Errorf("last status %+v, want COMPLETED with 42", st)
	}
}

func TestWatchErrors(t *testing.T) {
	b := apitest.NewBackend()
	srv := apitest.Serve(t, b, nil)
	ctx := context.Background()

	// An unknown job is final: no retrying for the give-up time.
	c, err := api.NewClient([]string{srv.URL()}, apitest.Token, api.WithWatchGiveUp(time.Hour, time.Millisecond, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.Watch(ctx, "nope", func(api.JobStatus) { t.Error("status for an unknown job") })
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.Code != api.CodeNotFound {
		t.Fatalf("unknown job: %v", err)
	}

	// No endpoint at all: gives up after the give-up time.
	dead, err := api.NewClient([]string{deadURL(t), deadURL(t)}, apitest.Token,
		api.WithWatchGiveUp(100*time.Millisecond, 5*time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	var ue *api.UnreachableError
	if err := dead.Watch(ctx, "j1", func(api.JobStatus) {}); !errors.As(err, &ue) {
		t.Fatalf("all dead: %T %v, want *UnreachableError", err, err)
	}

	// ctx ends the watch.
	b.AddJob(runningJob("j1"))
	cctx, cancel := context.WithCancel(ctx)
	var once sync.Once
	err = c.Watch(cctx, "j1", func(api.JobStatus) { once.Do(cancel) })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled watch: %v", err)
	}
}

// A stream that goes silent (no events, no heartbeats) is taken for dead and
// reopened, which a half-open connection to a vanished node needs.
func TestWatchIdleTimeout(t *testing.T) {
	b := apitest.NewBackend()
	b.AddJob(runningJob("j1"))
	srv := apitest.Serve(t, b, func(c *api.ServerConfig) { c.StreamHeartbeat = time.Hour })
	c, err := api.NewClient([]string{srv.URL()}, apitest.Token, api.WithStreamIdleTimeout(50*time.Millisecond),
		api.WithWatchGiveUp(time.Minute, time.Millisecond, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var log statusLog
	done := make(chan error, 1)
	go func() { done <- c.Watch(ctx, "j1", log.add) }()
	// Each reopened stream starts with the current status.
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if n := log.len(); n < 3 {
			return fmt.Errorf("%d statuses, want reconnects", n)
		}
		return nil
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch: %v", err)
	}
}
