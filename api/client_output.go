package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// OutputTo writes a pipeline workflow's output as "json" or "csv" to w as
// the server streams it. Output reads the whole answer into memory first,
// under the client's response cap and request timeout; a manager leader
// streams the rows (OutputStreamer), and a million-row output is larger
// than the cap and can take longer than the timeout to arrive, so here
// only the answer's head is bounded by the timeout and the body is copied
// as it comes, for as long as it flows (ctx bounds it).
//
// The summary is asked first, through the client's failover and its wait
// for a leader: its answer names a node that serves the output, which the
// rows are then asked of, the other endpoints after it. An error after the
// first bytes reached w ends the call: they cannot be taken back.
func (c *Client) OutputTo(ctx context.Context, id, workflow, format string, w io.Writer) error {
	if format == "" {
		format = "json"
	}
	if format != "json" && format != "csv" {
		return fmt.Errorf("output format %q: want json or csv", format)
	}
	if _, err := c.OutputSummary(ctx, id, workflow); err != nil {
		return err
	}
	req := request{method: http.MethodGet, path: jobPath(id, "/results"),
		query: url.Values{"format": {format}, "workflow": {workflow}}, idempotent: true}
	n := len(c.endpoints)
	start := int(c.first.Load())
	var last error
	for i := range n {
		ep := c.endpoints[(start+i)%n]
		started, err := c.streamFrom(ctx, ep, req, w)
		if err == nil || started || ctx.Err() != nil {
			return err
		}
		var apiErr *Error
		if errors.As(err, &apiErr) && !failoverAnswer(apiErr, true) {
			return apiErr
		}
		last = err
	}
	return &UnreachableError{Endpoints: c.Endpoints(), Err: last}
}

// streamFrom asks ep for req and copies a 200 answer's body to w; started
// says bytes reached w.
func (c *Client) streamFrom(ctx context.Context, ep string, req request, w io.Writer) (started bool, err error) {
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	head := time.AfterFunc(c.requestTimeout, func() {
		cancel(fmt.Errorf("no answer from %s within %s", ep, c.requestTimeout))
	})
	hreq, err := c.newRequest(sctx, ep, req)
	if err != nil {
		head.Stop()
		return false, err
	}
	resp, err := c.hc.Do(hreq)
	if !head.Stop() && err == nil {
		resp.Body.Close()
		err = context.Cause(sctx)
	}
	if err != nil {
		return false, fmt.Errorf("output from %s: %w", ep, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			return false, fmt.Errorf("read answer from %s: %w", ep, err)
		}
		return false, decodeError(&answer{status: resp.StatusCode, header: resp.Header, body: body, endpoint: ep})
	}
	cw := &countingWriter{w: w}
	if _, err := io.Copy(cw, resp.Body); err != nil {
		return cw.n > 0, fmt.Errorf("output from %s, after %d bytes: %w", ep, cw.n, err)
	}
	return true, nil
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
