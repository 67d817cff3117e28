package api

import (
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"
)

// Media types of the event stream.
const (
	ContentTypeSSE    = "text/event-stream"
	ContentTypeNDJSON = "application/x-ndjson"
)

// streamWriteTimeout bounds one write to an event stream, so a client that
// stops reading cannot pin a handler (and its backend watch) forever; the
// server has no global write timeout because streams last as long as jobs.
const streamWriteTimeout = 30 * time.Second

// jobEvents streams a job's status: the current one at once, one per
// change, and the terminal one last, after which the stream ends. A stream
// that ends without a terminal status (shutdown, leadership change) is the
// client's cue to reconnect, possibly elsewhere.
func (s *Server) jobEvents(w http.ResponseWriter, r *http.Request) {
	id, ok := jobIDFrom(w, r)
	if !ok {
		return
	}
	ndjson := acceptsNDJSON(r.Header.Values("Accept"))
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.streams, cancel) // Shutdown ends streams
	defer stop()

	updates, err := s.backend.Watch(ctx, id)
	if err != nil {
		s.fail(w, r, fmt.Errorf("watch job %s: %w", id, err))
		return
	}
	s.metrics.streamOpened()
	defer s.metrics.streamClosed()

	h := w.Header()
	if ndjson {
		h.Set("Content-Type", ContentTypeNDJSON)
	} else {
		h.Set("Content-Type", ContentTypeSSE)
	}
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx and friends: do not buffer
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		return
	}

	heartbeat := time.NewTicker(s.cfg.StreamHeartbeat)
	defer heartbeat.Stop()
	sent := 0
	for {
		var frame []byte
		terminal := false
		select {
		case <-ctx.Done():
			s.log.Debug("event stream ended early", "job_id", id, "events", sent, "err", ctx.Err())
			return
		case st, open := <-updates:
			if !open {
				s.log.Debug("event stream closed by backend", "job_id", id, "events", sent)
				return
			}
			b, err := json.Marshal(st)
			if err != nil {
				s.log.Error("encode job status", "job_id", id, "err", err)
				return
			}
			frame = eventFrame(b, ndjson)
			terminal = st.Status.Terminal()
			sent++
		case <-heartbeat.C:
			frame = heartbeatFrame(ndjson)
		}
		// A socket deadline is wall-clock time, whatever clock the config
		// injects for rate limiting.
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
		if _, err := w.Write(frame); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		if terminal {
			return
		}
	}
}

// eventFrame frames one JSON status. json.Marshal output has no raw
// newlines, so it always fits one SSE data line.
func eventFrame(b []byte, ndjson bool) []byte {
	if ndjson {
		return append(b, '\n')
	}
	frame := make([]byte, 0, len(b)+8)
	frame = append(frame, "data: "...)
	frame = append(frame, b...)
	return append(frame, "\n\n"...)
}

// heartbeatFrame is an SSE comment, or an empty NDJSON line, which readers
// skip.
func heartbeatFrame(ndjson bool) []byte {
	if ndjson {
		return []byte("\n")
	}
	return []byte(": keepalive\n\n")
}

func acceptsNDJSON(accept []string) bool {
	for _, h := range accept {
		for part := range strings.SplitSeq(h, ",") {
			mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err == nil && (mt == ContentTypeNDJSON || mt == "application/jsonl") {
				return true
			}
		}
	}
	return false
}
