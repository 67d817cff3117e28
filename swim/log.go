package swim

import (
	"bytes"
	"context"
	"log"
	"log/slog"
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
