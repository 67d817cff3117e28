package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"tempest/api"
	"tempest/api/apitest"
	"tempest/internal/testutil"
	"tempest/wire"
)

// stream opens an event stream and returns a line reader over it.
func openStream(t *testing.T, url, accept string) (*http.Response, *bufio.Reader) {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apitest.Token)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp, bufio.NewReader(resp.Body)
}

// readLine reads one line, failing the test if none comes in time (a read
// blocked forever is the bug these tests look for).
func readLine(t *testing.T, r *bufio.Reader) (string, error) {
	t.Helper()
	type result struct {
		line string
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		line, err := r.ReadString('\n')
		ch <- result{line, err}
	}()
	select {
	case res := <-ch:
		return res.line, res.err
	case <-time.After(10 * time.Second):
		t.Fatal("no line from the event stream within 10s")
		return "", nil
	}
}

func runningJob(id string) api.JobStatus {
	return api.JobStatus{JobID: id, Name: "n", Status: wire.JobRunning,
		Workflows: []api.WorkflowStatus{{Name: "nap", WorkflowID: id + "-w", Type: "sleep", Status: wire.WorkflowRunning}}}
}

func TestEventStreams(t *testing.T) {
	tests := []struct {
		name, accept, wantType string
		// next returns the next status in the stream, skipping heartbeats.
		next func(t *testing.T, r *bufio.Reader) (api.JobStatus, error)
	}{
		{"sse", "", api.ContentTypeSSE, nextSSE},
		{"sse explicit", "text/event-stream", api.ContentTypeSSE, nextSSE},
		{"ndjson", "application/x-ndjson", api.ContentTypeNDJSON, nextNDJSON},
		{"ndjson among others", "application/json;q=0.5, application/x-ndjson", api.ContentTypeNDJSON, nextNDJSON},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := apitest.NewBackend()
			b.AddJob(runningJob("j1"))
			srv := apitest.Serve(t, b, func(c *api.ServerConfig) { c.StreamHeartbeat = 20 * time.Millisecond })
			resp, r := openStream(t, srv.URL()+"/v1/jobs/j1/events", tt.accept)
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != tt.wantType {
				t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			st, err := tt.next(t, r)
			if err != nil || st.Status != wire.JobRunning {
				t.Fatalf("first event %+v (%v), want the current RUNNING status", st, err)
			}
			b.Update("j1", func(s *api.JobStatus) { s.TotalCompleted = 5 })
			st, err = tt.next(t, r)
			if err != nil || st.TotalCompleted != 5 {
				t.Fatalf("second event %+v (%v), want 5 completed", st, err)
			}
			b.Finish("j1", wire.JobCompleted)
			st, err = tt.next(t, r)
			if err != nil || st.Status != wire.JobCompleted {
				t.Fatalf("third event %+v (%v), want COMPLETED", st, err)
			}
			// The stream ends after the terminal status.
			for {
				line, err := readLine(t, r)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if strings.TrimSpace(line) != "" && !strings.HasPrefix(line, ":") {
					t.Fatalf("data after the terminal status: %q", line)
				}
			}
			testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
				if n := b.Watchers("j1"); n != 0 {
					return fmt.Errorf("%d watchers left", n)
				}
				return nil
			})
		})
	}
}

func nextSSE(t *testing.T, r *bufio.Reader) (api.JobStatus, error) {
	var data string
	for {
		line, err := readLine(t, r)
		if err != nil {
			return api.JobStatus{}, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "" && data != "":
			var st api.JobStatus
			err := json.Unmarshal([]byte(data), &st)
			return st, err
		case strings.HasPrefix(line, "data: "):
			data += strings.TrimPrefix(line, "data: ")
		}
	}
}

func nextNDJSON(t *testing.T, r *bufio.Reader) (api.JobStatus, error) {
	for {
		line, err := readLine(t, r)
		if err != nil {
			return api.JobStatus{}, err
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		var st api.JobStatus
		err = json.Unmarshal([]byte(line), &st)
		return st, err
	}
}

func TestEventStreamHeartbeat(t *testing.T) {
	b := apitest.NewBackend()
	b.AddJob(runningJob("j1"))
	srv := apitest.Serve(t, b, func(c *api.ServerConfig) { c.StreamHeartbeat = 10 * time.Millisecond })
	_, r := openStream(t, srv.URL()+"/v1/jobs/j1/events", "")
	if _, err := nextSSE(t, r); err != nil {
		t.Fatal(err)
	}
	line, err := readLine(t, r)
	if err != nil || line != ": keepalive\n" {
		t.Fatalf("line %q (%v), want a keepalive comment", line, err)
	}
}

func TestEventStreamErrors(t *testing.T) {
	b := apitest.NewBackend()
	srv := apitest.Serve(t, b, nil)
	resp, body := newRawClient(t).do("GET", srv.URL()+"/v1/jobs/nope/events", nil, nil)
	if e := decodeErrorBody(t, body); resp.StatusCode != 404 || e.Code != api.CodeNotFound {
		t.Errorf("unknown job: %d %+v", resp.StatusCode, e)
	}
	b.SetError("Watch", wire.Errorf(wire.CodeUnavailable, "draining"))
	resp, body = newRawClient(t).do("GET", srv.URL()+"/v1/jobs/nope/events", nil, nil)
	if e := decodeErrorBody(t, body); resp.StatusCode != 503 || e.Code != api.CodeUnavailable {
		t.Errorf("unavailable: %d %+v", resp.StatusCode, e)
	}
}

// Shutdown must not wait for a long job's stream to end by itself.
func TestShutdownEndsStreams(t *testing.T) {
	b := apitest.NewBackend()
	b.AddJob(runningJob("j1"))
	srv := apitest.Serve(t, b, nil)
	_, r := openStream(t, srv.URL()+"/v1/jobs/j1/events", "application/x-ndjson")
	if _, err := nextNDJSON(t, r); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown with an open stream: %v", err)
	}
	if _, err := nextNDJSON(t, r); err == nil {
		t.Fatal("stream still delivering after Shutdown")
	}
	if srv.Shutdown(ctx) != nil {
		t.Error("second Shutdown failed")
	}
}
