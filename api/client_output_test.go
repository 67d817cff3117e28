package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"strings"
	"sync"
	"testing"
	"time"

	"tempest/api"
	"tempest/api/apitest"
)

// streamingBackend serves one pipeline's output whose rows wait, half-way
// (past what the server's buffers hold), until the client has written
// some of them out: only a client that writes the rows as they arrive
// sees them all.
type streamingBackend struct {
	*apitest.Backend
	rows    int
	written chan struct{} // closed once the client wrote the first row out
}

func (b *streamingBackend) summary() *api.PipelineOutput {
	return &api.PipelineOutput{JobID: "job-1", Workflow: "pipe", Complete: true, Header: []string{"key", "value"}}
}

func (b *streamingBackend) PipelineOutput(context.Context, string, string, bool) (*api.PipelineOutput, error) {
	return b.summary(), nil
}

func (b *streamingBackend) PipelineOutputRows(ctx context.Context, _, _ string) (*api.PipelineOutput, iter.Seq[[]string], error) {
	return b.summary(), func(yield func([]string) bool) {
		for i := range b.rows {
			if i == b.rows/2 {
				select {
				case <-b.written:
				case <-ctx.Done():
					return
				}
			}
			if !yield([]string{fmt.Sprintf("key-%06d", i), "1"}) {
				return
			}
		}
	}, nil
}

// firstRowWriter closes ch once what was written holds rows (4 kB).
type firstRowWriter struct {
	bytes.Buffer
	once sync.Once
	ch   chan struct{}
}

func (w *firstRowWriter) Write(p []byte) (int, error) {
	n, err := w.Buffer.Write(p)
	if w.Len() >= 4<<10 {
		w.once.Do(func() { close(w.ch) })
	}
	return n, err
}

// OutputTo writes a pipeline's rows as they arrive: the second half of the
// rows is sent only once some of the first were written out, which a
// client reading the whole answer before writing any of it never does (it
// waited out its request timeout).
func TestOutputToWritesRowsAsTheyArrive(t *testing.T) {
	b := &streamingBackend{Backend: apitest.NewBackend(), rows: 40_000, written: make(chan struct{})}
	srv := apitest.Serve(t, b, nil)
	c, err := api.NewClient([]string{srv.URL()}, apitest.Token, api.WithRequestTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, format := range []string{"csv", "json"} {
		b.written = make(chan struct{})
		w := &firstRowWriter{ch: b.written}
		if err := c.OutputTo(context.Background(), "job-1", "pipe", format, w); err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		var rows [][]string
		if format == "csv" {
			lines := strings.Split(strings.TrimSuffix(w.String(), "\n"), "\n")
			if lines[0] != "key,value" {
				t.Fatalf("csv header %q", lines[0])
			}
			for _, l := range lines[1:] {
				rows = append(rows, strings.Split(l, ","))
			}
		} else {
			var out api.PipelineOutput
			if err := json.Unmarshal(w.Bytes(), &out); err != nil {
				t.Fatalf("json: %v", err)
			}
			rows = out.Rows
		}
		if len(rows) != b.rows || rows[b.rows-1][0] != fmt.Sprintf("key-%06d", b.rows-1) {
			t.Fatalf("%s: %d rows, want %d", format, len(rows), b.rows)
		}
	}
	if err := c.OutputTo(context.Background(), "job-1", "pipe", "xml", &bytes.Buffer{}); err == nil {
		t.Fatal("an unknown format was asked for")
	}
}
