package api

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"
)

// The cancel body is the only JSON the server decodes from clients (job
// files go through jobfile, which has its own fuzzer).
func FuzzDecodeCancelRequest(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"reason":"enough"}`, `{"reason":1}`, `{"why":"x"}`, `{} {}`, `{"reason":"` + strings.Repeat("x", 600) + `"}`, `[`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := DecodeCancelRequest(bytes.NewReader(b))
		if err != nil {
			if req != (CancelRequest{}) {
				t.Fatalf("error %v with a non-zero request %+v", err, req)
			}
			return
		}
		if len(req.Reason) > maxCancelReason || !utf8.ValidString(req.Reason) {
			t.Fatalf("accepted reason of %d bytes (valid UTF-8: %v)", len(req.Reason), utf8.ValidString(req.Reason))
		}
	})
}

// The client reads event streams from whatever answers at an endpoint.
func FuzzReadEvents(f *testing.F) {
	f.Add([]byte("data: {\"job_id\":\"j\",\"status\":\"RUNNING\"}\n\n: keepalive\n\ndata: {\"status\":\"COMPLETED\"}\n\n"), true)
	f.Add([]byte("{\"job_id\":\"j\",\"status\":\"RUNNING\"}\n\n{\"status\":\"FAILED\"}\n"), false)
	f.Add([]byte("data: {\"job_id\":\ndata: \"j\"}\n\nevent: x\nid: 3\n"), true)
	f.Add([]byte("data: nope\n\n"), true)
	f.Add([]byte("\x00\xff\n"), false)
	f.Fuzz(func(t *testing.T, b []byte, sse bool) {
		ct := ContentTypeNDJSON
		if sse {
			ct = ContentTypeSSE
		}
		calls := 0
		got, terminal, _ := readEvents(bytes.NewReader(b), ct, func() {}, func(st JobStatus) {
			calls++
		})
		if got != calls {
			t.Fatalf("reported %d events, delivered %d", got, calls)
		}
		if terminal && got == 0 {
			t.Fatal("terminal without an event")
		}
	})
}

// The client turns any error answer into *Error, whatever the body.
func FuzzDecodeError(f *testing.F) {
	f.Add(503, []byte(`{"error":"no leader","code":"no_leader"}`), "3")
	f.Add(400, []byte(`{"error":"x","code":"malformed","problems":[{"line":3,"path":"a","message":"m"}]}`), "")
	f.Add(502, []byte("<html>bad gateway</html>"), "")
	f.Add(500, []byte{0xff, 0xfe, '\n'}, "soon")
	f.Fuzz(func(t *testing.T, status int, body []byte, retryAfter string) {
		h := http.Header{}
		h.Set("Retry-After", retryAfter)
		e := decodeError(&answer{status: status, header: h, body: body, endpoint: "http://x"})
		if e.Status != status || e.RetryAfter < 0 {
			t.Fatalf("decoded %+v", e)
		}
		if e.Code == "" && strings.ContainsAny(e.Message, "\n\r") {
			t.Fatalf("foreign error body kept line breaks: %q", e.Message)
		}
		_ = e.Error()
	})
}

// FuzzReadSubmission: a job file and its data files arrive as one multipart
// body from any client; the reader must refuse what it cannot use with an
// error, never panic, and never hand back more bytes than it was sent.
func FuzzReadSubmission(f *testing.F) {
	body, ctype, err := encodeBundle([]byte("name: x\n"), "x.yaml", map[string][]byte{"users.csv": []byte("a,b\n1,2\n")})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(body, ctype)
	if body, ctype, err := encodeBundleBlobs([]byte("name: x\n"), "x.yaml", nil, map[string]string{"users.csv": strings.Repeat("ab", 32)}, SubmitVars{}); err == nil {
		f.Add(body, ctype)
	}
	if body, ctype, err := encodeBundleBlobs([]byte("name: x\n"), "x.yaml", nil, nil,
		SubmitVars{Env: map[string]string{"HOST": "a"}, Secrets: map[string]string{"TOKEN": "b"}}); err == nil {
		f.Add(body, ctype)
	}
	f.Add([]byte("name: x\n"), "application/yaml")
	f.Add([]byte("--b\r\n\r\n--b--"), "multipart/form-data; boundary=b")
	f.Fuzz(func(t *testing.T, b []byte, contentType string) {
		r, err := http.NewRequest(http.MethodPost, "http://x/v1/jobs", bytes.NewReader(b))
		if err != nil {
			return
		}
		r.Header.Set("Content-Type", contentType)
		sub, err := readSubmission(r)
		job, data := sub.jobFile, sub.data
		if err != nil {
			return
		}
		n := len(job)
		for _, d := range data {
			n += len(d)
		}
		if n > len(b) {
			t.Fatalf("read %d bytes of files from a %d-byte body", n, len(b))
		}
	})
}

// FuzzBlobRequest feeds the blob routes' parsing untrusted path values,
// queries and chunk bodies: it must never panic, accept only a 64-digit hex
// sum and non-negative numbers, and never read past the chunk bound.
func FuzzBlobRequest(f *testing.F) {
	f.Add(strings.Repeat("ab", 32), "offset=0&size=10", []byte("chunk"), int64(5))
	f.Add("ABC", "offset=-1", []byte{}, int64(-1))
	f.Add(strings.Repeat("0", 64), "offset=99999999999999999999", []byte("x"), int64(2))
	f.Fuzz(func(t *testing.T, sum, query string, body []byte, contentLength int64) {
		q, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		req, err := parseBlobRequest(sum, q, true, true)
		if err == nil {
			if len(req.sum) != 64 || strings.Trim(req.sum, "0123456789abcdef") != "" || req.offset < 0 || req.size < 0 {
				t.Fatalf("accepted %q %q as %+v", sum, query, req)
			}
		}
		b, err := readBlobChunk(bytes.NewReader(body), contentLength)
		if err == nil && (len(b) > MaxBlobChunk || len(b) > len(body)) {
			t.Fatalf("read %d bytes from a %d-byte body", len(b), len(body))
		}
	})
}

// A member change comes from any client holding the token; what it
// accepts must pass its own check, and what it refuses is the zero value.
func FuzzDecodeMemberChange(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"id":"dc1-manager-4","addr":"127.0.0.1:7400"}`, `{"id":"a b","addr":"x:1"}`,
		`{"id":"m","addr":"nohost"}`, `{"id":"m","addr":"h:0"}`, `{"id":"m","addr":"h:1","x":1}`, `{"id":"m","addr":"h:1"} {}`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		mc, err := DecodeMemberChange(bytes.NewReader(b))
		if err != nil {
			if mc != (MemberChange{}) {
				t.Fatalf("error %v with a non-zero member %+v", err, mc)
			}
			return
		}
		if err := mc.Check(); err != nil {
			t.Fatalf("accepted %+v, which its check refuses: %v", mc, err)
		}
	})
}
