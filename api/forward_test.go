package api_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"tempest/api"
	"tempest/api/apitest"
	"tempest/internal/testutil"
	"tempest/wire"
)

func TestFollowerForwardsToLeader(t *testing.T) {
	leaderB := apitest.NewBackend()
	leader := apitest.Serve(t, leaderB, nil)
	followerB := apitest.NewBackend()
	followerB.SetLeader(false, leader.URL())
	follower := apitest.Serve(t, followerB, nil)
	ctx := context.Background()

	c := newClient(t, follower.URL())
	id, err := c.Submit(ctx, []byte(goodJob), "smoke.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(leaderB.Submissions()) != 1 || len(followerB.Submissions()) != 0 {
		t.Fatalf("submissions: leader %d, follower %d; want the leader to get it", len(leaderB.Submissions()), len(followerB.Submissions()))
	}
	st, err := c.Job(ctx, id)
	if err != nil || st.JobID != id {
		t.Fatalf("job via follower: %+v %v", st, err)
	}

	// A bad file's problems come back through the proxy intact.
	_, err = c.Submit(ctx, []byte("name: x\nworkflows: 3\n"), "x.yaml")
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.Status != 400 || len(apiErr.Problems) == 0 || apiErr.Problems[0].Line != 2 {
		t.Fatalf("bad file via follower: %v, want 400 with a problem on line 2", err)
	}

	// An event stream through the follower ends at the terminal status.
	done := make(chan error, 1)
	var last atomic.Value
	go func() {
		done <- c.Watch(ctx, id, func(st api.JobStatus) { last.Store(st.Status) })
	}()
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if leaderB.Watchers(id) == 0 {
			return errors.New("no watcher on the leader yet")
		}
		return nil
	})
	leaderB.Finish(id, wire.JobCompleted)
	select {
	case err := <-done:
		if err != nil || last.Load() != wire.JobCompleted {
			t.Fatalf("Watch: %v, last status %v", err, last.Load())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Watch through the follower did not end at the terminal status")
	}

	// The token is checked at the follower too: a wrong one is not forwarded.
	raw := newRawClient(t)
	resp, _ := raw.do("GET", follower.URL()+"/v1/jobs", nil, map[string]string{"Authorization": "Bearer wrong"})
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("wrong token via follower: %d", resp.StatusCode)
	}
	_, metrics := raw.do("GET", follower.URL()+"/metrics", nil, nil)
	if !strings.Contains(string(metrics), "tempest_api_forwarded_requests_total 4\n") {
		t.Errorf("follower metrics do not count 4 forwarded requests:\n%s", metrics)
	}
	// /healthz is the follower's own answer.
	h, err := c.Health(ctx)
	if err != nil || h.Leader {
		t.Errorf("follower health %+v %v, want leader=false", h, err)
	}
}

// A client whose endpoints know no leader goes round them again (for its
// leader wait) until an election names one, rather than failing the call.
func TestFollowerWaitsForALeader(t *testing.T) {
	leaderB := apitest.NewBackend()
	leader := apitest.Serve(t, leaderB, nil)
	var elected atomic.Bool
	followerB := apitest.NewBackend()
	followerB.SetLeaderFunc(func() (bool, string) {
		if elected.Load() {
			return false, leader.URL()
		}
		return false, ""
	})
	follower := apitest.Serve(t, followerB, nil)
	time.AfterFunc(200*time.Millisecond, func() { elected.Store(true) })
	id, err := newClient(t, follower.URL()).Submit(context.Background(), []byte(goodJob), "smoke.yaml")
	if err != nil || !elected.Load() {
		t.Fatalf("submit during an election: %v (elected %v)", err, elected.Load())
	}
	if len(leaderB.Submissions()) != 1 {
		t.Fatalf("the new leader got %d submissions of %s, want 1", len(leaderB.Submissions()), id)
	}
}

// Nodes that know no leader answer no_leader at once, with a Retry-After,
// and the client asks each once per round: before, each held the request
// for LeaderWait (3 s) polling for an election, so a client of three gates
// during a long election waited 9 s for its refusal. The backends count how
// often the API asked them for a leader: once each, never a poll.
func TestNoLeaderIsAnsweredAtOnce(t *testing.T) {
	var urls []string
	var asked []*atomic.Int32
	for range 3 {
		n := new(atomic.Int32)
		b := apitest.NewBackend()
		b.SetLeaderFunc(func() (bool, string) { n.Add(1); return false, "" })
		urls = append(urls, apitest.Serve(t, b, nil).URL())
		asked = append(asked, n)
	}
	c, err := api.NewClient(urls, apitest.Token, api.WithLeaderWait(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	_, err = c.Submit(context.Background(), []byte(goodJob), "smoke.yaml")
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeNoLeader || ae.RetryAfter != api.NoLeaderRetryAfter {
		t.Fatalf("submit with no leader anywhere: %v, want no_leader with retry after %s", err, api.NoLeaderRetryAfter)
	}
	for i, n := range asked {
		if got := n.Load(); got != 1 {
			t.Errorf("endpoint %d was asked for its leader %d times, want once (answered at once, not polled)", i, got)
		}
	}
}

// A submission one endpoint may have stored (it answered outcome_unknown)
// is never reported refused because the other endpoints then knew no
// leader: the call ends saying the outcome is unknown. The chaos checker
// caught the client doing otherwise (refused, yet the job ran).
func TestNoLeaderElsewhereDoesNotHideAnUnknownOutcome(t *testing.T) {
	maybe := apitest.NewBackend()
	maybe.SetError("Submit", &wire.Error{Code: wire.CodeOutcomeUnknown, Message: "no quorum: outcome unknown"})
	none := apitest.NewBackend()
	none.SetLeader(false, "")
	c, err := api.NewClient([]string{apitest.Serve(t, maybe, nil).URL(), apitest.Serve(t, none, nil).URL()}, apitest.Token, api.WithLeaderWait(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	_, err = c.Submit(context.Background(), []byte(goodJob), "smoke.yaml")
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeOutcomeUnknown {
		t.Fatalf("submit stored maybe at one endpoint, no leader at the other: %v, want outcome_unknown (not a refusal)", err)
	}
}

// The same across re-sends: a submission answered outcome_unknown is sent
// again under its key, and when the re-send then finds no leader anywhere
// (the leader that may hold it lost its term) the call still ends outcome
// unknown. It used to end no_leader, a refusal, and the chaos checker saw
// that job run.
func TestNoLeaderOnResendDoesNotHideAnUnknownOutcome(t *testing.T) {
	var asked atomic.Int32
	b := apitest.NewBackend()
	b.SetError("Submit", &wire.Error{Code: wire.CodeOutcomeUnknown, Message: "no quorum: outcome unknown"})
	b.SetLeaderFunc(func() (bool, string) { return asked.Add(1) == 1, "" })
	c, err := api.NewClient([]string{apitest.Serve(t, b, nil).URL()}, apitest.Token, api.WithLeaderWait(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	_, err = c.Submit(context.Background(), []byte(goodJob), "smoke.yaml")
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeOutcomeUnknown || !strings.Contains(ae.Message, "may still run") {
		t.Fatalf("submit answered outcome_unknown, then no_leader on its re-send: %v, want outcome_unknown saying it may still run", err)
	}
	if asked.Load() < 2 {
		t.Fatalf("the submission was sent %d times, want it re-sent after outcome_unknown", asked.Load())
	}
}

// electedBackend is a follower whose election named a leader whose API
// address it has not learnt yet.
type electedBackend struct{ *apitest.Backend }

func (electedBackend) LeaderElected() bool { return true }

// A follower whose election named a leader holds a request until the
// leader's address arrives (announced every second) and forwards it, rather
// than answer no_leader: the client gets its answer, not a retry.
func TestFollowerWaitsForTheElectedLeadersAddress(t *testing.T) {
	leaderB := apitest.NewBackend()
	leader := apitest.Serve(t, leaderB, nil)
	var announced atomic.Bool
	followerB := apitest.NewBackend()
	followerB.SetLeaderFunc(func() (bool, string) {
		if announced.Load() {
			return false, leader.URL()
		}
		return false, ""
	})
	follower := apitest.Serve(t, electedBackend{followerB}, nil)
	time.AfterFunc(200*time.Millisecond, func() { announced.Store(true) })
	c, err := api.NewClient([]string{follower.URL()}, apitest.Token, api.WithLeaderWait(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if _, err := c.Submit(context.Background(), []byte(goodJob), "smoke.yaml"); err != nil || !announced.Load() {
		t.Fatalf("submit through a follower that knows of a leader: %v (announced %v)", err, announced.Load())
	}
	if n := len(leaderB.Submissions()); n != 1 {
		t.Fatalf("the leader holds %d submissions, want 1", n)
	}
}

// A read forwarded to a leader that died (the dial fails, so nothing reached
// it) is forwarded again to the leader elected next.
func TestFollowerForwardsReadsToTheNextLeader(t *testing.T) {
	next := apitest.NewBackend()
	nextSrv := apitest.Serve(t, next, nil)
	id, err := newClient(t, nextSrv.URL()).Submit(context.Background(), []byte(goodJob), "smoke.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dead := fmt.Sprintf("http://127.0.0.1:%d", testutil.FreeTCPPort(t))
	var elected atomic.Bool
	followerB := apitest.NewBackend()
	followerB.SetLeaderFunc(func() (bool, string) {
		if elected.Load() {
			return false, nextSrv.URL()
		}
		return false, dead
	})
	follower := apitest.Serve(t, followerB, nil)
	time.AfterFunc(200*time.Millisecond, func() { elected.Store(true) })
	st, err := newClient(t, follower.URL()).Job(context.Background(), id)
	if err != nil || st.JobID != id || !elected.Load() {
		t.Fatalf("read through a follower whose leader died: %+v, %v (elected %v)", st, err, elected.Load())
	}
	// A submission (its body kept and sent again) goes the same way.
	elected.Store(false)
	time.AfterFunc(200*time.Millisecond, func() { elected.Store(true) })
	if _, err := newClient(t, follower.URL()).Submit(context.Background(), []byte(goodJob), "smoke.yaml"); err != nil || !elected.Load() {
		t.Fatalf("submit through a follower whose leader died: %v (elected %v)", err, elected.Load())
	}
	if n := len(next.Submissions()); n != 2 {
		t.Fatalf("the new leader holds %d submissions, want 2", n)
	}
}

// shortLeaderWait keeps the tests that expect no leader from waiting the
// default LeaderWait for one.
func shortLeaderWait(c *api.ServerConfig) { c.LeaderWait = 100 * time.Millisecond }

func TestFollowerWithoutLeader(t *testing.T) {
	tests := []struct {
		name     string
		setup    func(t *testing.T) string // returns the follower's URL
		wantCode string
	}{
		{"no leader known", func(t *testing.T) string {
			b := apitest.NewBackend()
			b.SetLeader(false, "")
			return apitest.Serve(t, b, shortLeaderWait).URL()
		}, api.CodeNoLeader},
		{"leader unreachable", func(t *testing.T) string {
			b := apitest.NewBackend()
			b.SetLeader(false, fmt.Sprintf("http://127.0.0.1:%d", testutil.FreeTCPPort(t)))
			return apitest.Serve(t, b, shortLeaderWait).URL()
		}, api.CodeUnavailable},
		{"leader URL unusable", func(t *testing.T) string {
			b := apitest.NewBackend()
			b.SetLeader(false, "quic://10.0.0.1:1")
			return apitest.Serve(t, b, shortLeaderWait).URL()
		}, api.CodeUnavailable},
		{"two followers naming each other", func(t *testing.T) string {
			b1, b2 := apitest.NewBackend(), apitest.NewBackend()
			f1 := apitest.Serve(t, b1, shortLeaderWait)
			f2 := apitest.Serve(t, b2, shortLeaderWait)
			b1.SetLeader(false, f2.URL())
			b2.SetLeader(false, f1.URL())
			return f1.URL()
		}, api.CodeNoLeader},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := tt.setup(t)
			resp, body := newRawClient(t).do("POST", url+"/v1/jobs", []byte(goodJob), nil)
			if e := decodeErrorBody(t, body); resp.StatusCode != http.StatusServiceUnavailable || e.Code != tt.wantCode {
				t.Fatalf("%d %+v, want 503 %s", resp.StatusCode, e, tt.wantCode)
			}
		})
	}
}

// A backend that loses leadership between the API's check and its call
// answers not-leader; the API redirects to the new leader, and the client
// follows with its token.
func TestNotLeaderRedirect(t *testing.T) {
	newLeaderB := apitest.NewBackend()
	newLeaderB.AddJob(runningJob("j1"))
	newLeader := apitest.Serve(t, newLeaderB, nil)

	oldB := apitest.NewBackend()
	oldB.SetError("Job", &wire.Error{Code: wire.CodeNotLeader, Leader: "m2"})
	var calls atomic.Int32
	oldB.SetLeaderFunc(func() (bool, string) {
		if calls.Add(1)%2 == 1 {
			return true, "" // the check before the call
		}
		return false, newLeader.URL() // after the call
	})
	old := apitest.Serve(t, oldB, nil)

	resp, body := newRawClient(t).do("GET", old.URL()+"/v1/jobs/j1?x=1", nil, nil)
	if resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != newLeader.URL()+"/v1/jobs/j1?x=1" {
		t.Fatalf("%d Location %q (%s), want 307 to the new leader", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	if e := decodeErrorBody(t, body); e.Code != api.CodeNotLeader || e.Leader != "m2" {
		t.Errorf("body %+v", e)
	}

	st, err := newClient(t, old.URL()).Job(context.Background(), "j1")
	if err != nil || st.JobID != "j1" {
		t.Fatalf("client did not follow the redirect: %+v %v", st, err)
	}
}

// A follower's Shutdown ends the streams it forwards, as it ends its own:
// they would otherwise hold shutdown until the job ends.
func TestFollowerShutdownEndsForwardedStreams(t *testing.T) {
	leaderB := apitest.NewBackend()
	leaderB.AddJob(runningJob("j1"))
	leader := apitest.Serve(t, leaderB, nil)
	followerB := apitest.NewBackend()
	followerB.SetLeader(false, leader.URL())
	follower := apitest.Serve(t, followerB, nil)

	_, r := openStream(t, follower.URL()+"/v1/jobs/j1/events", "application/x-ndjson")
	if st, err := nextNDJSON(t, r); err != nil || st.JobID != "j1" {
		t.Fatalf("first event via follower: %+v %v", st, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := follower.Shutdown(ctx); err != nil {
		t.Fatalf("follower Shutdown with a forwarded stream open: %v", err)
	}
	if _, err := nextNDJSON(t, r); err == nil {
		t.Fatal("forwarded stream still delivering after the follower shut down")
	}
	// The leader notices its client (the follower) left.
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if n := leaderB.Watchers("j1"); n != 0 {
			return fmt.Errorf("%d watchers left on the leader", n)
		}
		return nil
	})
}

// The not-leader error itself may name the leader's API (the manager puts
// it in LeaderAddr); the API redirects there when the backend's own view
// has no URL.
func TestNotLeaderRedirectFromError(t *testing.T) {
	b := apitest.NewBackend() // Leader() keeps saying "me, no URL": a stale view
	b.SetError("Cancel", &wire.Error{Code: wire.CodeNotLeader, Leader: "m3", LeaderAddr: "http://10.0.0.3:7411"})
	srv := apitest.Serve(t, b, nil)
	resp, body := newRawClient(t).do("POST", srv.URL()+"/v1/jobs/j1/cancel", nil, nil)
	if resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != "http://10.0.0.3:7411/v1/jobs/j1/cancel" {
		t.Fatalf("%d Location %q (%s)", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	// A QUIC address is not an API URL: no redirect, and no leader to name.
	b.SetError("Cancel", &wire.Error{Code: wire.CodeNotLeader, Leader: "m3", LeaderAddr: "10.0.0.3:7000"})
	resp, body = newRawClient(t).do("POST", srv.URL()+"/v1/jobs/j1/cancel", nil, nil)
	if e := decodeErrorBody(t, body); resp.StatusCode != http.StatusServiceUnavailable || e.Code != api.CodeNoLeader || e.Leader != "m3" {
		t.Fatalf("%d %+v, want 503 no_leader naming m3", resp.StatusCode, e)
	}
}
