package h1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestReadResponse(t *testing.T) {
	long := strings.Repeat("v", 3*readBufSize)
	cases := []struct {
		name   string
		in     string
		head   bool
		status int
		keep   bool
		body   string
		// rest is what must be left unread (the next response's bytes).
		rest string
		// wantErr is matched with errors.Is; phase, when set, must be the
		// phaseError's.
		wantErr error
		phase   Phase
	}{
		{name: "content-length", in: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloNEXT", status: 200, keep: true, body: "hello", rest: "NEXT"},
		{name: "no reason phrase", in: "HTTP/1.1 204\r\n\r\n", status: 204, keep: true},
		{name: "bare LF", in: "HTTP/1.1 200 OK\nContent-Length: 2\n\nok", status: 200, keep: true, body: "ok"},
		{name: "header case and spacing", in: "HTTP/1.1 200 OK\r\ncontent-LENGTH:   3  \r\n\r\nabc", status: 200, keep: true, body: "abc"},
		{name: "connection close", in: "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx", status: 200, body: "x"},
		{name: "connection list with close", in: "HTTP/1.1 200 OK\r\nConnection: Upgrade, Close\r\nContent-Length: 0\r\n\r\n", status: 200},
		{name: "http/1.0 closes", in: "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx", status: 200, body: "x"},
		{name: "http/1.0 keep-alive", in: "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx", status: 200, keep: true, body: "x"},
		{name: "delimited by close", in: "HTTP/1.1 200 OK\r\n\r\nall of it", status: 200, body: "all of it"},
		{name: "chunked", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n1;ext=1\r\n!\r\n0\r\nX-Trailer: t\r\n\r\nNEXT",
			status: 200, keep: true, body: "hello!", rest: "NEXT"},
		{name: "chunked wins over length", in: "HTTP/1.1 200 OK\r\nContent-Length: 99\r\nTransfer-Encoding: chunked\r\n\r\nA\r\n0123456789\r\n0\r\n\r\n",
			status: 200, keep: true, body: "0123456789"},
		{name: "interim responses skipped", in: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok",
			status: 201, keep: true, body: "ok"},
		{name: "head has no body", in: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nNEXT", head: true, status: 200, keep: true, rest: "NEXT"},
		{name: "304 has no body", in: "HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n", status: 304, keep: true},
		{name: "101 ends the connection", in: "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n", status: 101},
		{name: "long header line skipped", in: "HTTP/1.1 200 OK\r\nX-Big: " + long + "\r\nContent-Length: 2\r\n\r\nok", status: 200, keep: true, body: "ok"},
		{name: "empty", in: "", wantErr: io.EOF},
		{name: "cut in the status line", in: "HTTP/1.1 2", wantErr: errPartial},
		{name: "cut in the headers", in: "HTTP/1.1 200 OK\r\nContent-Le", wantErr: errPartial},
		{name: "not http", in: "SSH-2.0-OpenSSH\r\n\r\n", wantErr: ErrMalformed},
		{name: "bad status", in: "HTTP/1.1 2x0 OK\r\n\r\n", wantErr: ErrMalformed},
		{name: "bad length", in: "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", wantErr: ErrMalformed},
		{name: "conflicting lengths", in: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nx", wantErr: ErrMalformed},
		{name: "header without colon", in: "HTTP/1.1 200 OK\r\nnonsense\r\n\r\n", wantErr: ErrMalformed},
		{name: "short body", in: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", status: 200, wantErr: io.ErrUnexpectedEOF, phase: PhaseBody},
		{name: "cut chunk", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", status: 200, wantErr: io.ErrUnexpectedEOF, phase: PhaseBody},
		{name: "bad chunk size", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", status: 200, wantErr: ErrMalformed, phase: PhaseBody},
		{name: "chunk without CRLF", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nxy\r\n0\r\n\r\n", status: 200, wantErr: ErrMalformed, phase: PhaseBody},
	}
	for _, tc := range cases {
		for _, discard := range []bool{false, true} {
			name := tc.name
			if discard {
				name += "/discard"
			}
			t.Run(name, func(t *testing.T) {
				br := bufio.NewReaderSize(strings.NewReader(tc.in), readBufSize)
				var body bytes.Buffer
				var w io.Writer = &body
				if discard {
					w = nil
				}
				status, keep, err := readResponse(br, tc.head, nil, w)
				if tc.wantErr != nil {
					if !errors.Is(err, tc.wantErr) {
						t.Fatalf("error %v, want %v", err, tc.wantErr)
					}
					var pe *phaseError
					if gotBody := errors.As(err, &pe); gotBody != (tc.phase == PhaseBody) {
						t.Fatalf("error %v: body phase %v, want %v", err, gotBody, tc.phase == PhaseBody)
					}
					if keep {
						t.Fatal("a failed response must not keep the connection")
					}
					return
				}
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				if status != tc.status || keep != tc.keep {
					t.Fatalf("status %d keep %v, want %d %v", status, keep, tc.status, tc.keep)
				}
				if !discard && body.String() != tc.body {
					t.Fatalf("body %q, want %q", body.String(), tc.body)
				}
				rest, _ := io.ReadAll(br)
				if string(rest) != tc.rest {
					t.Fatalf("left %q unread, want %q", rest, tc.rest)
				}
			})
		}
	}
}

func TestHasToken(t *testing.T) {
	cases := []struct {
		v, token string
		want     bool
	}{
		{"close", "close", true},
		{" Keep-Alive , close", "close", true},
		{"closed", "close", false},
		{"gzip, chunked", "chunked", true},
		{"", "close", false},
	}
	for _, tc := range cases {
		if got := hasToken([]byte(tc.v), tc.token); got != tc.want {
			t.Errorf("hasToken(%q, %q) = %v, want %v", tc.v, tc.token, got, tc.want)
		}
	}
}

// TestReadResponseOnHeader checks that the caller sees the final response's
// fields, trimmed and in order, and none of an interim response's: a 103's
// Link (or a Set-Cookie on a 100) is not the answer to the request.
func TestReadResponseOnHeader(t *testing.T) {
	in := "HTTP/1.1 103 Early Hints\r\nSet-Cookie: early=1\r\n\r\n" +
		"HTTP/1.1 302 Found\r\nLocation:  /next \r\nSet-Cookie: a=1; Path=/\r\nset-cookie: b=2\r\nContent-Length: 0\r\n\r\n"
	var got []string
	status, _, err := readResponse(bufio.NewReader(strings.NewReader(in)), false, func(name, value []byte) {
		got = append(got, string(name)+"="+string(value))
	}, nil)
	if err != nil || status != 302 {
		t.Fatalf("status %d, err %v", status, err)
	}
	want := []string{"Location=/next", "Set-Cookie=a=1; Path=/", "set-cookie=b=2", "Content-Length=0"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("fields %q, want %q", got, want)
	}
}

// BenchmarkReadResponse is the parser's cost for a typical small answer
// (four header fields), without and with a header callback like the one
// the http workflow passes for its cookie jar and redirects: what handing
// the caller the fields costs a load that uses neither.
func BenchmarkReadResponse(b *testing.B) {
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nDate: Sat, 28 Nov 2026 15:00:00 GMT\r\nServer: t\r\nContent-Length: 2\r\n\r\nok")
	var seen int
	for _, tc := range []struct {
		name string
		cb   func(name, value []byte)
	}{
		{"no-callback", nil},
		{"callback", func(name, value []byte) {
			if len(name) == 10 && bytes.EqualFold(name, []byte("Set-Cookie")) || len(name) == 8 && bytes.EqualFold(name, []byte("Location")) {
				seen++
			}
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			r := bytes.NewReader(resp)
			br := bufio.NewReaderSize(r, readBufSize)
			b.ReportAllocs()
			for b.Loop() {
				r.Reset(resp)
				br.Reset(r)
				if _, _, err := readResponse(br, false, tc.cb, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	_ = seen
}
