package target

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Routes. Everything that is not a control route is answered and counted.
const (
	StatsPath   = "/__stats"
	ResetPath   = "/__reset"
	statusRoute = "/status/"
	delayRoute  = "/delay/"
)

// A response body with its Content-Length header value, built once. The
// header slices are shared by every response and never modified, so
// assigning them costs nothing where Header().Set would build a slice.
type cannedBody struct {
	b    []byte
	clen []string
}

func canned(b []byte) cannedBody {
	return cannedBody{b: b, clen: []string{strconv.Itoa(len(b))}}
}

var (
	textPlain       = []string{"text/plain; charset=utf-8"}
	errorBody       = canned([]byte("error\n"))
	emptyBody       = canned(nil)
	badStatusBody   = canned([]byte("bad request: /status/{code} takes a code in 200-599\n"))
	badDelayBody    = canned([]byte("bad request: /delay/{ms} takes 0-" + strconv.Itoa(int(MaxDelay/time.Millisecond)) + " milliseconds\n"))
	allowGetHead    = []string{"GET, HEAD"}
	allowPost       = []string{"POST"}
	applicationJSON = []string{"application/json"}
)

// okBody is "ok" repeated and cut to size bytes.
func okBody(size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = "ok"[i%2]
	}
	return b
}

// ServeHTTP answers one request. The hot path (default route) reads and
// discards the request body, waits out latency and jitter, counts, and
// writes a canned response: no locks, no logging, and no allocation of its
// own (latency timers are pooled; waiting on the request's context makes
// net/http's context build its Done channel, once per waiting request).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if strings.HasPrefix(path, "/__") {
		switch path {
		case StatsPath:
			s.serveStats(w, r)
			return
		case ResetPath:
			s.serveReset(w, r)
			return
		}
	}

	s.c.inFlight.Add(1)
	defer s.c.inFlight.Add(-1)

	if r.Body != nil && r.Body != http.NoBody {
		// io.Discard reads through a pooled buffer.
		n, err := io.Copy(io.Discard, r.Body)
		s.c.bytesIn.Add(uint64(n))
		if err != nil {
			// The client went away or sent a broken body: nobody to answer.
			panic(http.ErrAbortHandler)
		}
	}

	method := methodIndex(r.Method)
	switch {
	case strings.HasPrefix(path, statusRoute):
		code, err := strconv.Atoi(path[len(statusRoute):])
		if err != nil || code < 200 || code >= maxStatus {
			s.answer(w, http.StatusBadRequest, method, badStatusBody)
			return
		}
		s.answer(w, code, method, emptyBody)
	case strings.HasPrefix(path, delayRoute):
		ms, err := strconv.Atoi(path[len(delayRoute):])
		if err != nil || ms < 0 || ms > int(MaxDelay/time.Millisecond) {
			s.answer(w, http.StatusBadRequest, method, badDelayBody)
			return
		}
		s.wait(r.Context(), time.Duration(ms)*time.Millisecond)
		s.answer(w, http.StatusOK, method, s.ok)
	default:
		fail, jitter := s.dice.roll()
		s.wait(r.Context(), s.cfg.Latency+jitter)
		if fail {
			s.answer(w, http.StatusInternalServerError, method, errorBody)
			return
		}
		s.answer(w, http.StatusOK, method, s.ok)
	}
}

// answer counts the response and then writes it. Counting first is what
// makes /__stats safe to compare with a client's own count: any response a
// client has received was counted before it was sent. The converse holds
// except when a connection breaks after the count, which the client sees as
// an error.
//
// Small bodies leave the header map alone: touching it makes net/http clone
// it (a map and a slice per response), while untouched it fills in
// Content-Length and Content-Type ("text/plain; charset=utf-8" for every
// canned body) from the buffered body without allocating. Beyond its buffer
// it would switch to chunked encoding, so large bodies set both headers.
func (s *Server) answer(w http.ResponseWriter, code, method int, body cannedBody) {
	s.c.count(code, method)
	if len(body.b) > netHTTPBuffer {
		h := w.Header()
		h["Content-Type"] = textPlain
		h["Content-Length"] = body.clen
	}
	w.WriteHeader(code)
	// A failed write is the client's loss: the request was answered.
	_, _ = w.Write(body.b)
}

// netHTTPBuffer is net/http's bufferBeforeChunkingSize: a handler that
// writes no more than this and returns gets a computed Content-Length.
// TestBodySize pins it on both sides.
const netHTTPBuffer = 2048

// wait sleeps for d unless the client goes away or a forced shutdown cuts
// waits short; then the request is not answered and not counted. Timers are
// pooled: since Go 1.23, Stop and Reset leave no stale tick behind, so a
// timer can be reused safely.
func (s *Server) wait(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t, _ := s.timers.Get().(*time.Timer)
	if t == nil {
		t = time.NewTimer(d)
	} else {
		t.Reset(d)
	}
	defer s.timers.Put(t)
	defer t.Stop()
	select {
	case <-t.C:
		return
	case <-ctx.Done():
	case <-s.abort:
	}
	// Abort the connection without writing: returning normally would make
	// net/http send an empty 200 on our behalf.
	panic(http.ErrAbortHandler)
}

func (s *Server) serveStats(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header()["Allow"] = allowGetHead
		http.Error(w, "use GET", http.StatusMethodNotAllowed)
		return
	}
	b, err := json.Marshal(s.Stats())
	if err != nil { // cannot happen for Stats; keep the control path honest anyway
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	b = append(b, '\n')
	h := w.Header()
	h["Content-Type"] = applicationJSON
	h["Cache-Control"] = []string{"no-store"}
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	_, _ = w.Write(b)
}

func (s *Server) serveReset(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header()["Allow"] = allowPost
		http.Error(w, "use POST", http.StatusMethodNotAllowed)
		return
	}
	s.Reset()
	w.WriteHeader(http.StatusNoContent)
}
