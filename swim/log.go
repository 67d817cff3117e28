package swim

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"sync/atomic"
	"time"
)

// slogWriter turns memberlist's log lines ("[WARN] memberlist: ...") into
// slog records at the matching level, so memberlist's chatter obeys the
// role's log level and format instead of going to stderr.
type slogWriter struct {
	log *slog.Logger
}

func newMemberlistLogger(l *slog.Logger) *log.Logger {
	return log.New(slogWriter{log: l}, "", 0)
}

// splitLevel strips memberlist's level tag from a line. Untagged lines are
// Info, which is how memberlist treats them too.
func splitLevel(line []byte) (slog.Level, []byte) {
	i := bytes.IndexByte(line, ']')
	if len(line) == 0 || line[0] != '[' || i < 0 {
		return slog.LevelInfo, line
	}
	rest := bytes.TrimLeft(line[i+1:], " ")
	switch string(line[1:i]) {
	case "DEBUG", "TRACE":
		return slog.LevelDebug, rest
	case "INFO":
		return slog.LevelInfo, rest
	case "WARN":
		return slog.LevelWarn, rest
	case "ERR", "ERROR":
		return slog.LevelError, rest
	}
	return slog.LevelInfo, line
}

func (w slogWriter) Write(p []byte) (int, error) {
	n := len(p)
	level, line := splitLevel(bytes.TrimRight(p, "\r\n"))
	line = bytes.TrimPrefix(line, []byte("memberlist: "))
	ctx := context.Background()
	if w.log.Enabled(ctx, level) {
		w.log.Log(ctx, level, string(line), "component", "memberlist")
	}
	return n, nil
}

// logQueueSize is how many records a node's log queue holds. memberlist
// logs a handful of lines per probe round at most, so a full queue means
// the sink has stopped, not that the node is busy.
const logQueueSize = 1024

// logQueue decouples a node's logging from its log sink. memberlist writes
// log lines while holding its member lock (a refutation is logged before it
// is sent) and swim logs from inside memberlist's callbacks, so a write that
// blocks — stderr piped to a stalled reader, a log file on a disk busy with
// other work — would stop the node's probes, acks and refutations until it
// returned, and its peers would declare it dead while it is alive. Records
// are queued without blocking and written by one goroutine the Node owns;
// when the queue is full they are dropped and counted, and the count is
// logged once the sink has caught up.
type logQueue struct {
	ch      chan queuedRecord
	dropped atomic.Uint64 // since the last report
	total   atomic.Uint64
	// report receives the drop notices: the node's logger's handler.
	report slog.Handler
}

type queuedRecord struct {
	h slog.Handler
	r slog.Record
}

func newLogQueue(size int) *logQueue {
	return &logQueue{ch: make(chan queuedRecord, size)}
}

// wrap returns a handler that queues records for next.
func (q *logQueue) wrap(next slog.Handler) slog.Handler {
	return &queuedHandler{next: next, q: q}
}

func (q *logQueue) put(h slog.Handler, r slog.Record) {
	select {
	case q.ch <- queuedRecord{h: h, r: r}:
	default:
		q.dropped.Add(1)
		q.total.Add(1)
	}
}

// run writes queued records until ctx ends, then writes what is already
// queued and returns. Records put after that stay in the queue unwritten:
// only memberlist's stragglers log after Shutdown.
func (q *logQueue) run(ctx context.Context) {
	for {
		select {
		case qr := <-q.ch:
			q.write(qr)
		case <-ctx.Done():
			for {
				select {
				case qr := <-q.ch:
					q.write(qr)
				default:
					q.reportDrops()
					return
				}
			}
		}
	}
}

func (q *logQueue) write(qr queuedRecord) {
	// The caller's context may be long gone; handlers get none of it.
	_ = qr.h.Handle(context.Background(), qr.r)
	// Reported once the sink has caught up, after the records that were
	// queued when the dropping began.
	if len(q.ch) == 0 {
		q.reportDrops()
	}
}

func (q *logQueue) reportDrops() {
	if q.dropped.Load() == 0 || q.report == nil {
		return
	}
	n := q.dropped.Swap(0)
	ctx := context.Background()
	if q.report.Enabled(ctx, slog.LevelWarn) {
		r := slog.NewRecord(time.Now(), slog.LevelWarn, "swim log records dropped: the log sink was too slow", 0)
		r.AddAttrs(slog.Uint64("dropped", n), slog.Uint64("dropped_total", q.total.Load()))
		_ = q.report.Handle(ctx, r)
	}
}

// queuedHandler is the slog.Handler side of a logQueue. The record keeps
// the time it was logged at, so timestamps say when memberlist acted, not
// when the sink caught up.
type queuedHandler struct {
	next slog.Handler
	q    *logQueue
}

func (h *queuedHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h *queuedHandler) Handle(_ context.Context, r slog.Record) error {
	h.q.put(h.next, r.Clone())
	return nil
}

func (h *queuedHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &queuedHandler{next: h.next.WithAttrs(attrs), q: h.q}
}

func (h *queuedHandler) WithGroup(name string) slog.Handler {
	return &queuedHandler{next: h.next.WithGroup(name), q: h.q}
}
