package gate

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tempest/api"
	"tempest/rainstorm"
	"tempest/transport"
	"tempest/wire"
)

// outputDC is a fake datacenter leader serving one pipeline's output of
// rows in pages of perPage rows. A new leader gives a cursor (the next
// row's number) with every page but the last; old one answers by offset
// only. refuse makes the next that many cursors refused, as by a new
// leader holding other rows; hold, when set, is waited on before any page
// but the first is answered.
type outputDC struct {
	rows    [][]string
	perPage int
	old     bool
	refuse  atomic.Int32
	hold    chan struct{}

	mu       sync.Mutex
	byCursor int // pages asked for by cursor
	byOffset int // pages after the first asked for by offset
}

func (f *outputDC) serve(tr transport.Transport) {
	tr.Handle(wire.TypeRainstormOutputRequest, func(_ context.Context, _ transport.Peer, m wire.Message) (wire.Message, error) {
		req := m.(*wire.RainstormOutputRequest)
		from := req.Offset
		if !f.old && len(req.Cursor) > 0 {
			if f.refuse.Add(-1) >= 0 {
				return nil, wire.Errorf(wire.CodeStaleFence, "output cursor: not the rows held here")
			}
			n, err := strconv.ParseUint(string(req.Cursor), 10, 64)
			if err != nil {
				return nil, wire.Errorf(wire.CodeStaleFence, "output cursor: %v", err)
			}
			from = n
		}
		f.mu.Lock()
		switch {
		case !f.old && len(req.Cursor) > 0:
			f.byCursor++
		case from > 0:
			f.byOffset++
		}
		f.mu.Unlock()
		if from > 0 && f.hold != nil {
			<-f.hold
		}
		p := &wire.RainstormOutputPage{Status: wire.JobCompleted, Complete: true, Header: []string{"key", "value"},
			BadRecords: 2, BadFirst: []uint64{3, 9}, Total: uint64(len(f.rows)), Offset: min(from, uint64(len(f.rows))),
			Tasks: []wire.RainstormOutputTask{{Stage: 1, Name: "count", Status: wire.WorkflowCompleted, Records: 10, RecordsOut: 4}}}
		if req.Rows {
			end := min(int(p.Offset)+f.perPage, len(f.rows))
			p.Rows = f.rows[p.Offset:end]
			if !f.old && req.Resume && end < len(f.rows) {
				p.Cursor = []byte(strconv.Itoa(end))
			}
		}
		return p, nil
	})
}

// outputGate is a gate with a pipeline job placed in east, whose leader is
// f, and the gate's API server.
func outputGate(t *testing.T, f *outputDC) (*Gate, string, *httptest.Server) {
	t.Helper()
	hub := transport.NewHub()
	// A page waits as long as the test holds it (TestGateStreamsPipelineOutputAsPagesArrive).
	hg := startHubGates(t, hub, []string{"g1"}, time.Minute, func(c *Config) { c.DispatchTimeout = time.Minute })
	east := newFakeDC(t, hub, "east")
	seeDCs(hg, east)
	g := hg.leader(10*time.Second, "g1")
	f.serve(east.tr)
	ack, err := g.Submit(context.Background(), &wire.JobSubmission{Name: "pipe", DatacenterCount: 1,
		Workflows: []wire.WorkflowSpec{{Name: "pipe", Type: rainstorm.TypeName, Cores: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.NewServer(api.ServerConfig{Token: "secret", RateLimit: 100, RateBurst: 100,
		RequestTimeout: 30 * time.Second}, g).Handler())
	t.Cleanup(srv.Close)
	return g, ack.JobID, srv
}

// wholeOutput is a gate's API as it was before it streamed: the output
// built whole from the pages, then written.
type wholeOutput struct {
	api.Backend
	api.OutputBackend
}

func get(t *testing.T, url string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: %s: %s", url, resp.Status, b)
	}
	return resp
}

func body(t *testing.T, url string) string {
	t.Helper()
	resp := get(t, url)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// testRows are n rows with fields JSON and CSV both escape.
func testRows(n int) [][]string {
	rows := make([][]string, n)
	for i := range rows {
		rows[i] = []string{fmt.Sprintf("k%04d \"q\", <b>&é", i), strconv.Itoa(i)}
	}
	return rows
}

// Through a gate a pipeline's output reads the same, byte for byte, as
// JSON and as CSV, streamed page by page as when it was built whole: from
// a leader giving cursors (each page after the first asked for by one),
// from an older leader giving none (by offset), and when a cursor is
// refused between pages (a new leader holding other rows: that page is
// asked for again by offset, and no row is repeated or missing).
func TestGateStreamsPipelineOutputByteForByte(t *testing.T) {
	for _, tc := range []struct {
		name   string
		old    bool
		refuse int32
	}{{"cursor", false, 0}, {"old leader", true, 0}, {"cursor refused", false, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			f := &outputDC{rows: testRows(50), perPage: 7, old: tc.old}
			g, job, srv := outputGate(t, f)
			whole := httptest.NewServer(api.NewServer(api.ServerConfig{Token: "secret", RateLimit: 100, RateBurst: 100,
				RequestTimeout: 30 * time.Second}, wholeOutput{g, g}).Handler())
			defer whole.Close()
			for _, format := range []string{"json", "csv"} {
				path := "/v1/jobs/" + job + "/results?workflow=pipe&format=" + format
				f.refuse.Store(tc.refuse)
				got := body(t, srv.URL+path)
				f.refuse.Store(tc.refuse)
				want := body(t, whole.URL+path)
				if got != want {
					t.Fatalf("%s streamed:\n%s\nbuilt whole:\n%s", format, got, want)
				}
				if n := strings.Count(got, "k00"); n != len(f.rows) {
					t.Fatalf("%s: %d rows, want %d", format, n, len(f.rows))
				}
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			// 50 rows in pages of 7: 8 pages, 7 after the first, twice per
			// format (streamed and whole), less the pages refused.
			wantCursor, wantOffset := 4*7-4*int(tc.refuse), 4*int(tc.refuse)
			if tc.old {
				wantCursor, wantOffset = 0, 4*7
			}
			if f.byCursor != wantCursor || f.byOffset != wantOffset {
				t.Fatalf("pages by cursor %d, by offset %d; want %d and %d", f.byCursor, f.byOffset, wantCursor, wantOffset)
			}
		})
	}
}

// The gate writes a page's rows to its client as the page arrives: the
// client reads the first page's rows while the leader still holds the
// second. The gate built the whole output before answering.
func TestGateStreamsPipelineOutputAsPagesArrive(t *testing.T) {
	f := &outputDC{rows: testRows(20), perPage: 5, hold: make(chan struct{})}
	_, job, srv := outputGate(t, f)
	released := false
	release := func() {
		if !released {
			released = true
			close(f.hold)
		}
	}
	defer release()
	lines := make(chan string)
	go func() {
		defer close(lines)
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet,
			srv.URL+"/v1/jobs/"+job+"/results?workflow=pipe&format=csv", nil)
		if err != nil {
			return
		}
		req.Header.Set("Authorization", "Bearer secret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				return
			}
			lines <- l
		}
	}()
	// A broken gate never writes the first rows while the leader holds
	// the second page: the test would hang, so it gives up after long.
	giveUp := time.After(time.Minute)
	for i := range 1 + f.perPage {
		select {
		case _, ok := <-lines:
			if !ok {
				t.Fatalf("the output ended at line %d", i)
			}
		case <-giveUp:
			t.Fatalf("line %d of the output did not arrive while the leader held the second page", i)
		}
	}
	release()
	n := 1 + f.perPage
	for range lines {
		n++
	}
	if n != 1+len(f.rows) {
		t.Fatalf("%d lines, want %d", n, 1+len(f.rows))
	}
}
