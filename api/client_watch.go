package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sync/atomic"
	"time"
)

// maxEventBytes caps one event: a job's whole status, workflows and steps
// included.
const maxEventBytes = 16 << 20

// errStreamEnded is a stream that closed before the job's terminal status:
// the node shut down or lost leadership, so Watch reconnects.
var errStreamEnded = errors.New("event stream ended before the job finished")

// Watch calls fn with the job's status now and at every change until the
// job reaches a terminal status (then it returns nil) or ctx ends. When a
// stream breaks it reconnects, moving to the next endpoint, and the new
// stream starts with the current status, so fn may see a status twice but
// never misses the terminal one. It gives up when no endpoint serves the
// stream for the give-up time (WithWatchGiveUp), and at once on an error
// that another attempt cannot fix (unknown job, wrong token).
func (c *Client) Watch(ctx context.Context, id string, fn func(JobStatus)) error {
	n := len(c.endpoints)
	idx := int(c.first.Load())
	delay := c.backoffMin
	var failingSince time.Time
	failures := 0
	for {
		ep := c.endpoints[idx]
		got, terminal, err := c.watchOnce(ctx, ep, id, fn)
		if terminal {
			c.first.Store(int64(idx))
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !retryableWatchError(err) {
			return err
		}
		if got > 0 {
			// The stream worked for a while: this is a fresh break, not a
			// run of failures.
			c.first.Store(int64(idx))
			failingSince, failures, delay = time.Time{}, 0, c.backoffMin
		}
		now := c.now()
		if failingSince.IsZero() {
			failingSince = now
		}
		if now.Sub(failingSince) > c.watchGiveUp {
			var apiErr *Error
			if errors.As(err, &apiErr) {
				return apiErr
			}
			return &UnreachableError{Endpoints: c.Endpoints(), Err: err}
		}
		failures++
		idx = (idx + 1) % n
		// Every endpoint gets one immediate try after a break; a full round
		// of failures backs off before the next.
		if got == 0 && failures%n == 0 {
			wait := delay
			var apiErr *Error
			if errors.As(err, &apiErr) && apiErr.RetryAfter > wait {
				wait = apiErr.RetryAfter
			}
			if err := sleepCtx(ctx, wait); err != nil {
				return err
			}
			delay = min(delay*2, c.backoffMax)
		}
	}
}

// watchOnce follows one stream until it ends. got counts the statuses
// delivered.
func (c *Client) watchOnce(ctx context.Context, ep, id string, fn func(JobStatus)) (got int, terminal bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var idled atomic.Bool
	idle := time.AfterFunc(c.streamIdle, func() {
		idled.Store(true)
		cancel()
	})
	defer idle.Stop()

	h := http.Header{}
	h.Set("Accept", ContentTypeNDJSON)
	req, err := c.newRequest(sctx, ep, request{method: http.MethodGet, path: jobPath(id, "/events"), header: h})
	if err != nil {
		return 0, false, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if idled.Load() {
			return 0, false, fmt.Errorf("event stream from %s: no answer within %s", ep, c.streamIdle)
		}
		return 0, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return 0, false, decodeError(&answer{status: resp.StatusCode, header: resp.Header, body: body, endpoint: ep})
	}
	got, terminal, err = readEvents(resp.Body, resp.Header.Get("Content-Type"),
		func() { idle.Reset(c.streamIdle) }, fn)
	if err != nil && idled.Load() {
		err = fmt.Errorf("event stream from %s silent for %s: %w", ep, c.streamIdle, err)
	}
	if err == nil && !terminal {
		err = errStreamEnded
	}
	return got, terminal, err
}

// eventDecodeError is a stream carrying something other than job statuses:
// a server bug, not worth reconnecting for.
type eventDecodeError struct{ err error }

func (e *eventDecodeError) Error() string { return "decode job event: " + e.err.Error() }
func (e *eventDecodeError) Unwrap() error { return e.err }

func retryableWatchError(err error) bool {
	var dec *eventDecodeError
	if errors.As(err, &dec) {
		return false
	}
	var apiErr *Error
	if errors.As(err, &apiErr) {
		switch apiErr.Status {
		case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout,
			http.StatusTooManyRequests:
			return true
		}
		return false
	}
	return true // transport errors, broken and ended streams
}

// readEvents reads a stream of job statuses, NDJSON or SSE by content type,
// until the terminal status, EOF or an error. activity is called for every
// line, heartbeats included.
func readEvents(r io.Reader, contentType string, activity func(), fn func(JobStatus)) (got int, terminal bool, err error) {
	mt, _, _ := mime.ParseMediaType(contentType)
	sse := mt == ContentTypeSSE
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventBytes)
	var data []byte // SSE: data lines of the event being read
	deliver := func(b []byte) (bool, error) {
		var st JobStatus
		if err := json.Unmarshal(b, &st); err != nil {
			return false, &eventDecodeError{err}
		}
		got++
		fn(st)
		return st.Status.Terminal(), nil
	}
	for sc.Scan() {
		activity()
		line := sc.Bytes()
		if !sse {
			if len(bytes.TrimSpace(line)) == 0 {
				continue // heartbeat
			}
			if terminal, err := deliver(line); err != nil || terminal {
				return got, terminal, err
			}
			continue
		}
		switch {
		case len(line) == 0:
			if data == nil {
				continue
			}
			b := data
			data = nil
			if terminal, err := deliver(b); err != nil || terminal {
				return got, terminal, err
			}
		case line[0] == ':':
			// comment: heartbeat
		default:
			field, value, _ := bytes.Cut(line, []byte(":"))
			if string(field) != "data" {
				continue // event, id, retry: not used
			}
			value = bytes.TrimPrefix(value, []byte(" "))
			if len(data)+len(value) > maxEventBytes {
				return got, false, &eventDecodeError{errors.New("event too large")}
			}
			// data is our own buffer: value lives in the scanner's, which
			// the next Scan overwrites.
			if data == nil {
				data = make([]byte, 0, len(value))
			} else {
				data = append(data, '\n')
			}
			data = append(data, value...)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return got, false, &eventDecodeError{err}
		}
		return got, false, err
	}
	return got, false, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
