package h1

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// phaseError carries the phase a read failed in out of readResponse.
type phaseError struct {
	phase Phase
	err   error
}

func (e *phaseError) Error() string { return e.err.Error() }
func (e *phaseError) Unwrap() error { return e.err }

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// responseHead is what a response's status line and headers say about how
// to read it and the connection.
type responseHead struct {
	status    int
	length    int64 // -1: not given
	chunked   bool
	close     bool // the server will close, or HTTP/1.0 without keep-alive
	keepAlive bool // "Connection: keep-alive" (matters for HTTP/1.0)
	http10    bool
}

// readResponse reads one response from br: interim 1xx responses, then the
// final one, whose body it writes to body (nil discards it). keep reports
// whether the connection can carry another request. A failure while reading
// the body is a *phaseError with PhaseBody.
func readResponse(br *bufio.Reader, head bool, onHeader func(name, value []byte), body io.Writer) (status int, keep bool, err error) {
	var h responseHead
	for first := true; ; first = false {
		h, err = readHead(br, first, onHeader)
		if err != nil {
			return 0, false, err
		}
		// 101 would switch protocols, which a load test never asks for:
		// it is final, and the connection is no longer HTTP/1.1.
		if h.status >= 200 || h.status == 101 {
			break
		}
	}
	keep = !h.close && (!h.http10 || h.keepAlive) && h.status != 101
	switch {
	case head || h.status < 200 || h.status == 204 || h.status == 304:
		return h.status, keep, nil
	case h.chunked:
		err = readChunked(br, body)
	case h.length >= 0:
		err = copyN(br, body, h.length)
	default:
		// Delimited by the server closing the connection.
		keep = false
		err = copyToEOF(br, body)
	}
	if err != nil {
		return h.status, false, &phaseError{phase: PhaseBody, err: err}
	}
	return h.status, keep, nil
}

// readHead reads a status line and headers. For the first response of an
// exchange, a connection that closes before sending anything gives the bare
// io.EOF (or the read's own error), which the client may retry; once bytes
// have arrived, a failure wraps errPartial.
//
// onHeader (nil: none) sees the fields of a final response only: whether a
// response is interim is known from its status line, before its fields.
func readHead(br *bufio.Reader, first bool, onHeader func(name, value []byte)) (responseHead, error) {
	h := responseHead{length: -1}
	line, total, err := readLine(br)
	if err != nil {
		if total > 0 || !first {
			err = fmt.Errorf("%w: %w", errPartial, err)
		}
		return h, err
	}
	// "HTTP/1.1 200 OK": the version, a space, three digits, then a space
	// or the end of the line.
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' ||
		(len(line) > 12 && line[12] != ' ') {
		return h, malformed("status line %q", truncate(line))
	}
	h.http10 = line[7] == '0'
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return h, malformed("status line %q", truncate(line))
		}
		h.status = h.status*10 + int(c-'0')
	}
	if h.status < 100 {
		return h, malformed("status %d", h.status)
	}
	if h.status < 200 && h.status != 101 {
		onHeader = nil
	}
	for {
		line, n, err := readLine(br)
		if err != nil {
			return h, fmt.Errorf("%w: %w", errPartial, err)
		}
		if total += n; total > maxHeaderBytes {
			return h, malformed("headers longer than %d bytes", maxHeaderBytes)
		}
		if line == nil {
			continue // a long header line: not one the client reads
		}
		if len(line) == 0 {
			return h, nil
		}
		if err := h.field(line, onHeader); err != nil {
			return h, err
		}
	}
}

// field takes in one header line.
func (h *responseHead) field(line []byte, onHeader func(name, value []byte)) error {
	colon := bytes.IndexByte(line, ':')
	if colon <= 0 {
		return malformed("header line %q", truncate(line))
	}
	name, value := line[:colon], bytes.TrimSpace(line[colon+1:])
	if onHeader != nil {
		onHeader(name, value)
	}
	switch {
	case bytes.EqualFold(name, []byte("Content-Length")):
		n, ok := parseLength(value)
		if !ok || (h.length >= 0 && h.length != n) {
			return malformed("Content-Length %q", truncate(value))
		}
		h.length = n
	case bytes.EqualFold(name, []byte("Transfer-Encoding")):
		// RFC 9112 §6.1: chunked must be the last coding; anything else
		// means the body runs to the close, which readResponse's default
		// case does.
		if hasToken(value, "chunked") {
			h.chunked = true
		}
	case bytes.EqualFold(name, []byte("Connection")):
		if hasToken(value, "close") {
			h.close = true
		}
		if hasToken(value, "keep-alive") {
			h.keepAlive = true
		}
	}
	return nil
}

// readLine returns the next line without its CRLF (or bare LF), and how
// many bytes it took from br. A line longer than br's buffer is skipped and
// returned as nil: no header the client reads, and no chunk size, is that
// long, and callers bound how much they skip by the count.
func readLine(br *bufio.Reader) (line []byte, n int, err error) {
	line, err = br.ReadSlice('\n')
	n = len(line)
	if errors.Is(err, bufio.ErrBufferFull) {
		for errors.Is(err, bufio.ErrBufferFull) && n <= maxHeaderBytes {
			line, err = br.ReadSlice('\n')
			n += len(line)
		}
		if err == nil {
			return nil, n, nil
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, n, malformed("line longer than %d bytes", maxHeaderBytes)
		}
		return nil, n, err
	}
	if err != nil {
		return line, n, err
	}
	line = line[:len(line)-1]
	if k := len(line); k > 0 && line[k-1] == '\r' {
		line = line[:k-1]
	}
	return line, n, nil
}

// copyN moves exactly n bytes from br to w (nil: discard).
func copyN(br *bufio.Reader, w io.Writer, n int64) error {
	if w == nil {
		if _, err := br.Discard(int(min(n, int64(maxInt)))); err != nil {
			return unexpected(err)
		}
		return nil
	}
	for n > 0 {
		if br.Buffered() == 0 {
			if _, err := br.Peek(1); err != nil {
				return unexpected(err)
			}
		}
		p, _ := br.Peek(int(min(n, int64(br.Buffered())))) // already buffered: cannot fail
		if _, err := w.Write(p); err != nil {
			return err
		}
		_, _ = br.Discard(len(p))
		n -= int64(len(p))
	}
	return nil
}

// copyToEOF moves everything until the server closes the connection.
func copyToEOF(br *bufio.Reader, w io.Writer) error {
	if w == nil {
		w = io.Discard
	}
	_, err := br.WriteTo(w)
	return err
}

// readChunked reads a chunked body (RFC 9112 §7.1), ignoring chunk
// extensions and trailers.
func readChunked(br *bufio.Reader, w io.Writer) error {
	for {
		line, _, err := readLine(br)
		if err != nil {
			return unexpected(err)
		}
		if line == nil {
			return malformed("chunk size line too long")
		}
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i]
		}
		size, ok := parseHex(bytes.TrimSpace(line))
		if !ok {
			return malformed("chunk size %q", truncate(line))
		}
		if size == 0 {
			for skipped := 0; ; { // trailers, up to the empty line
				line, n, err := readLine(br)
				if err != nil {
					return unexpected(err)
				}
				if skipped += n; skipped > maxHeaderBytes {
					return malformed("trailers longer than %d bytes", maxHeaderBytes)
				}
				if line != nil && len(line) == 0 {
					return nil
				}
			}
		}
		if err := copyN(br, w, size); err != nil {
			return err
		}
		if line, _, err := readLine(br); err != nil {
			return unexpected(err)
		} else if line == nil || len(line) != 0 {
			return malformed("no CRLF after a chunk")
		}
	}
}

// unexpected turns an EOF inside a delimited body into the error it is.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

const maxInt = int(^uint(0) >> 1)

func parseLength(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

func parseHex(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		n = n<<4 | int64(d)
	}
	return n, true
}

// hasToken reports whether a comma-separated header value lists token,
// ignoring case.
func hasToken(v []byte, token string) bool {
	for len(v) > 0 {
		var item []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			item, v = v[:i], v[i+1:]
		} else {
			item, v = v, nil
		}
		if bytes.EqualFold(bytes.TrimSpace(item), []byte(token)) {
			return true
		}
	}
	return false
}

func truncate(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "…"
	}
	return string(b)
}
