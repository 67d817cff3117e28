package manager

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"tempest/api"
	"tempest/wire"
)

// liveHeap is the heap the process holds after a collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// A results read of a pipeline's output streams its rows from the store:
// half-way through reading 300,000 rows (about 4 MB of CSV) the leader
// holds little more than before the read, and the client has the first
// rows long before the last is read. The output was built whole first:
// every row decoded, then every byte of the CSV, held until written (a
// million-row read ran past the request timeout once).
func TestRainstormResultsReadHoldsAPageNotTheOutput(t *testing.T) {
	const pages, perPage = 30, 10_000
	p := newOnePipeline(t)
	c, lead, job, task, inc := p.c, p.lead, p.job, p.task, p.inc
	call := rsCaller(t, c, "w1", lead)
	call(&wire.RainstormOpen{Task: task, Incarnation: inc})
	for v := range pages {
		rows := make([]wire.RainstormRecord, perPage)
		for i := range rows {
			rows[i] = wire.RainstormRecord{Fields: []string{fmt.Sprintf("key-%08d", v*perPage+i), "5"}}
		}
		ck := &wire.RainstormCheckpoint{Task: task, Incarnation: inc, Version: uint64(v + 1), Done: v == pages-1,
			Inputs: []wire.RainstormInput{{Next: uint64(v + 2), EOS: v == pages-1}}, Rows: rows}
		if a := call(ck).(*wire.RainstormCheckpointAck); a.Refused {
			t.Fatalf("checkpoint %d refused: %s", v+1, a.Reason)
		}
	}
	// Small socket buffers on both ends, so the network holds little of
	// the output and a server that built it whole is seen holding it.
	srv := httptest.NewUnstartedServer(api.NewServer(api.ServerConfig{Token: "client-secret", RateLimit: 100, RateBurst: 100,
		RequestTimeout: 30 * time.Second}, lead).Handler())
	srv.Listener = smallBufListener{srv.Listener}
	srv.Start()
	defer srv.Close()
	srv.Client().Transport.(*http.Transport).DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(16 << 10)
		}
		return conn, err
	}

	before := liveHeap()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet,
		srv.URL+"/v1/jobs/"+job+"/results?workflow=pipe&format=csv", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer client-secret")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("results: %s: %s", resp.Status, b)
	}
	br := bufio.NewReader(resp.Body)
	line := func() string {
		t.Helper()
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the output: %v", err)
		}
		return l
	}
	if h := line(); h != "key,value\n" {
		t.Fatalf("header %q", h)
	}
	for i := range pages * perPage / 2 {
		if l, want := line(), fmt.Sprintf("key-%08d,5\n", i); l != want {
			t.Fatalf("row %d is %q, want %q", i, l, want)
		}
	}
	// The server is held at its write, half-way: what the read holds now.
	held := int64(liveHeap()) - int64(before)
	for i := pages * perPage / 2; i < pages*perPage; i++ {
		if l, want := line(), fmt.Sprintf("key-%08d,5\n", i); l != want {
			t.Fatalf("row %d is %q, want %q", i, l, want)
		}
	}
	if rest, _ := io.ReadAll(br); len(rest) > 0 {
		t.Fatalf("%d bytes after the last row", len(rest))
	}
	// The HTML report shows the head of the same stream and counts it.
	req, err = http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL+"/v1/jobs/"+job+"/results?format=html", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer client-secret")
	hresp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, err := io.ReadAll(hresp.Body)
	hresp.Body.Close()
	if err != nil || hresp.StatusCode != http.StatusOK {
		t.Fatalf("report: %s, %v", hresp.Status, err)
	}
	if want := fmt.Sprintf("%d rows, the first 50 shown", pages*perPage); !strings.Contains(string(page), want) ||
		!strings.Contains(string(page), "key-00000049") || strings.Contains(string(page), "key-00000050") {
		t.Fatalf("the report does not show the output's first 50 of %d rows", pages*perPage)
	}
	t.Logf("the leader held %d kB more half-way through a read of %d rows", held>>10, pages*perPage)
	if held > 2<<20 {
		t.Fatalf("half-way through a read of %d rows the process holds %d kB more than before it, want a page's worth (under 2 MB)",
			pages*perPage, held>>10)
	}
}

// smallBufListener gives each accepted connection a small send buffer.
type smallBufListener struct{ net.Listener }

func (l smallBufListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(16 << 10)
	}
	return conn, err
}
