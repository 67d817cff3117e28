package h1

import (
	"bufio"
	"bytes"
	"testing"
)

// FuzzReadResponse feeds whatever a target may answer to the response
// parser: it must return a status or an error, never panic, hang on a
// finite input, or write more body than the input held; the header fields
// it hands the caller are, together, no longer than the input.
func FuzzReadResponse(f *testing.F) {
	for _, seed := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.0 200 OK\r\n\r\nuntil close",
		"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
		"HTTP/1.1 999 ??\r\nContent-Length: 99999999999999999999\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n",
		"HTTP/1.1 302 Found\r\nLocation: /x\r\nSet-Cookie: a=1; Path=/\r\n: empty name\r\n\r\n",
	} {
		f.Add([]byte(seed), false)
	}
	f.Fuzz(func(t *testing.T, data []byte, head bool) {
		var body bytes.Buffer
		var fields int
		status, _, err := readResponse(bufio.NewReader(bytes.NewReader(data)), head, func(name, value []byte) {
			if len(name) == 0 {
				t.Fatal("a header field without a name")
			}
			fields += len(name) + len(value)
		}, &body)
		if fields > len(data) {
			t.Fatalf("handed %d header bytes from %d input bytes", fields, len(data))
		}
		if err == nil && (status < 100 || status > 999) {
			t.Fatalf("status %d without an error", status)
		}
		if body.Len() > len(data) {
			t.Fatalf("wrote %d body bytes from %d input bytes", body.Len(), len(data))
		}
	})
}
