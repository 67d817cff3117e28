package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"tempest/internal/blobstore"
	"tempest/internal/jobfile"
	"tempest/wire"
)

// Blobs (docs/blobs.md): files a job references by SHA-256, uploaded before
// the job in chunks, each chunk its own small request, so a file of any size
// crosses the API without being held whole anywhere, a follower forwards
// each request like any other, and an upload cut off resumes where the
// leader's copy ends:
//
//	GET  /v1/blobs/{sha256}                    → 200 BlobInfo, or 404
//	PUT  /v1/blobs/{sha256}?offset=N  (chunk)  → 200 BlobChunkAnswer; 409 with Have when N is not where the upload ends
//	POST /v1/blobs/{sha256}/commit?size=N      → 200 BlobInfo once durable; 202 while replication goes on
//
// A job file's data files then travel as names (FormDataBlob parts) instead
// of bytes.

// MaxBlobChunk bounds one chunk request's body.
const MaxBlobChunk = wire.MaxBlobChunk

// FormDataBlob is the multipart part that names a data file uploaded as a
// blob: its filename is the name as the job file writes it, its body the
// blob's hex SHA-256.
const FormDataBlob = "data_blob"

// BlobInfo describes a stored blob.
type BlobInfo struct {
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	// Replicas is how many managers hold the blob complete and verified,
	// Needed how many make it durable (a majority of the configured ones).
	Replicas int  `json:"replicas"`
	Needed   int  `json:"needed"`
	Durable  bool `json:"durable"`
}

// BlobChunkAnswer is the answer to a chunk: the bytes the leader holds.
type BlobChunkAnswer struct {
	Have int64 `json:"have"`
}

// BlobGapError is a commit of an upload that is short: Have bytes are held
// (a leader change since the chunks were sent), where the client resumes.
type BlobGapError struct {
	Sum        string
	Have, Size int64
}

func (e *BlobGapError) Error() string {
	return fmt.Sprintf("blob %s: %d of %d bytes received; upload the rest first", e.Sum, e.Have, e.Size)
}

// BlobBackend is implemented by backends that store blobs (the manager and
// the gate, each by embedding a BlobService).
// Errors are typed like Backend's.
type BlobBackend interface {
	StatBlob(ctx context.Context, sum string) (*BlobInfo, error)
	// PutBlobChunk appends data at offset and returns the bytes now held;
	// not offset+len(data) when the chunk did not start where the upload
	// ends (the client resumes from the returned count).
	PutBlobChunk(ctx context.Context, sum string, offset int64, data []byte) (int64, error)
	// CommitBlob verifies and stores the upload and replicates it, until
	// durable or ctx ends (then Durable is false and replication goes on).
	CommitBlob(ctx context.Context, sum string, size int64) (*BlobInfo, error)
	// ReadBlob returns a whole blob of at most limit bytes.
	ReadBlob(ctx context.Context, sum string, limit int64) ([]byte, error)
}

// blobRequest is a blob route's parsed path and query.
type blobRequest struct {
	sum    string
	offset int64 // PUT: where the chunk starts
	size   int64 // commit: the blob's size
}

// parseBlobRequest checks what a client sent in a blob route's path and
// query; the chunk body is read separately (readBlobChunk).
func parseBlobRequest(sum string, query url.Values, wantOffset, wantSize bool) (blobRequest, error) {
	req := blobRequest{sum: strings.ToLower(sum)}
	if len(req.sum) != 2*sha256.Size {
		return req, fmt.Errorf("blob name must be a SHA-256 in %d hex digits", 2*sha256.Size)
	}
	if _, err := hex.DecodeString(req.sum); err != nil {
		return req, errors.New("blob name must be a SHA-256 in hex digits")
	}
	num := func(key string) (int64, error) {
		vs := query[key]
		if len(vs) != 1 {
			return 0, fmt.Errorf("want exactly one %s= parameter", key)
		}
		n, err := strconv.ParseInt(vs[0], 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%s=%q: want a byte count, 0 or more", key, truncateName(vs[0]))
		}
		if n > blobstore.MaxSize {
			return 0, fmt.Errorf("%s=%d: past the largest blob a node stores (%s)", key, n, formatBytes(blobstore.MaxSize))
		}
		return n, nil
	}
	var err error
	if wantOffset {
		if req.offset, err = num("offset"); err != nil {
			return req, err
		}
	}
	if wantSize {
		if req.size, err = num("size"); err != nil {
			return req, err
		}
	}
	return req, nil
}

// readBlobChunk reads a chunk body of at most MaxBlobChunk bytes; with a
// known length (contentLength ≥ 0) in one allocation of that size.
func readBlobChunk(body io.Reader, contentLength int64) ([]byte, error) {
	if contentLength > MaxBlobChunk {
		return nil, &http.MaxBytesError{Limit: MaxBlobChunk}
	}
	if contentLength >= 0 {
		b := make([]byte, contentLength)
		if _, err := io.ReadFull(body, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	b, err := io.ReadAll(io.LimitReader(body, MaxBlobChunk+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxBlobChunk {
		return nil, &http.MaxBytesError{Limit: MaxBlobChunk}
	}
	return b, nil
}

func (s *Server) blobBackend(w http.ResponseWriter) (BlobBackend, bool) {
	bb, ok := s.backend.(BlobBackend)
	if !ok {
		writeErrorBody(w, http.StatusNotImplemented, ErrorBody{Code: CodeUnsupported,
			Error: "this node does not store blobs; send data files with the job (tempest submit does so by itself)"})
	}
	return bb, ok
}

func (s *Server) statBlob(w http.ResponseWriter, r *http.Request) {
	bb, ok := s.blobBackend(w)
	if !ok {
		return
	}
	req, err := parseBlobRequest(r.PathValue("sum"), r.URL.Query(), false, false)
	if err != nil {
		writeErrorBody(w, http.StatusBadRequest, ErrorBody{Code: CodeMalformed, Error: err.Error()})
		return
	}
	ctx, cancel := s.callContext(r)
	defer cancel()
	info, err := bb.StatBlob(ctx, req.sum)
	if err != nil {
		s.fail(w, r, fmt.Errorf("stat blob %s: %w", req.sum, err))
		return
	}
	writeJSON(w, http.StatusOK, info)
}

func (s *Server) putBlobChunk(w http.ResponseWriter, r *http.Request) {
	bb, ok := s.blobBackend(w)
	if !ok {
		return
	}
	req, err := parseBlobRequest(r.PathValue("sum"), r.URL.Query(), true, false)
	if err != nil {
		writeErrorBody(w, http.StatusBadRequest, ErrorBody{Code: CodeMalformed, Error: err.Error()})
		return
	}
	data, err := readBlobChunk(r.Body, r.ContentLength)
	if err != nil {
		s.bodyError(w, err)
		return
	}
	ctx, cancel := s.callContext(r)
	defer cancel()
	have, err := bb.PutBlobChunk(ctx, req.sum, req.offset, data)
	if err != nil {
		s.fail(w, r, fmt.Errorf("blob %s chunk at %d: %w", req.sum, req.offset, err))
		return
	}
	if have < req.offset+int64(len(data)) {
		writeJSON(w, http.StatusConflict, ErrorBody{Code: CodeRejected, Have: &have,
			Error: fmt.Sprintf("chunk at %d, but the upload holds %d bytes: send from %d", req.offset, have, have)})
		return
	}
	writeJSON(w, http.StatusOK, BlobChunkAnswer{Have: have})
}

func (s *Server) commitBlob(w http.ResponseWriter, r *http.Request) {
	bb, ok := s.blobBackend(w)
	if !ok {
		return
	}
	req, err := parseBlobRequest(r.PathValue("sum"), r.URL.Query(), false, true)
	if err != nil {
		writeErrorBody(w, http.StatusBadRequest, ErrorBody{Code: CodeMalformed, Error: err.Error()})
		return
	}
	// Half the request timeout: a large blob's replication may take
	// longer, and the client must get an answer (202) before it gives up.
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout/2)
	defer cancel()
	info, err := bb.CommitBlob(ctx, req.sum, req.size)
	var gap *BlobGapError
	if errors.As(err, &gap) {
		writeJSON(w, http.StatusConflict, ErrorBody{Code: CodeRejected, Have: &gap.Have, Error: gap.Error()})
		return
	}
	if err != nil {
		s.fail(w, r, fmt.Errorf("commit blob %s: %w", req.sum, err))
		return
	}
	status := http.StatusOK
	if !info.Durable {
		status = http.StatusAccepted
	}
	writeJSON(w, status, info)
}

// blobDataReader serves the data files of a submission: bytes sent inline,
// or blobs read from the backend (at most limit bytes each).
func blobDataReader(ctx context.Context, bb BlobBackend, inline map[string][]byte, blobs map[string]string, limit int64) func(string) ([]byte, error) {
	return func(name string) ([]byte, error) {
		if b, ok := inline[name]; ok {
			return b, nil
		}
		sum, ok := blobs[name]
		if !ok || bb == nil {
			return nil, &os.PathError{Op: "open", Path: name, Err: jobfile.ErrDataFileNotSent}
		}
		b, err := bb.ReadBlob(ctx, sum, limit)
		if err != nil {
			return nil, fmt.Errorf("blob %s: %w", sum, err)
		}
		return b, nil
	}
}

// ---- client ---------------------------------------------------------------------

// UploadProgress is called after each chunk with the bytes sent so far.
type UploadProgress func(sent, total int64)

// BlobStat asks whether the cluster stores sum; a *Error with CodeNotFound
// when it does not.
func (c *Client) BlobStat(ctx context.Context, sum string) (*BlobInfo, error) {
	var info BlobInfo
	if err := c.getJSON(ctx, "/v1/blobs/"+url.PathEscape(sum), nil, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// UploadBlob stores the size bytes of r (an io.ReaderAt: a file) as a blob
// named by their SHA-256, which the caller computed (HashFile), and returns
// once a majority of the managers hold it. A blob the cluster already holds
// durably is not sent again; an upload cut off resumes where the leader's
// copy ends. Memory use is one chunk, whatever the size.
func (c *Client) UploadBlob(ctx context.Context, sum string, r io.ReaderAt, size int64, progress UploadProgress) (*BlobInfo, error) {
	if info, err := c.BlobStat(ctx, sum); err == nil && info.Durable && info.Size == size {
		return info, nil
	} else if err != nil && !IsNotFound(err) {
		return nil, fmt.Errorf("upload blob %s: %w", sum, err)
	}
	path := "/v1/blobs/" + url.PathEscape(sum)
	// resumes bounds how often the cluster may send the upload back to an
	// earlier offset (a leader change: the new leader holds less). Being
	// sent ahead is progress, bounded by size, and does not count: a new
	// leader's copy may still be growing under the upload as the previous
	// leader's replication lands, so that every chunk finds it ahead.
	off, resumes := int64(0), 0
	resume := func(have int64, err error) error {
		if have <= off { // not ahead: sent back, or (from a confused server) told to stay
			resumes++
		}
		if resumes > 16 || have > size {
			return fmt.Errorf("upload blob %s: %w", sum, err)
		}
		off = have
		return nil
	}
	for {
		for off < size {
			// A fresh buffer per chunk: net/http may still be reading a
			// request's body after its answer came (an early 429), so a
			// reused one could be overwritten under it.
			buf := make([]byte, min(int64(MaxBlobChunk), size-off))
			n, err := r.ReadAt(buf, off)
			if err != nil && !(errors.Is(err, io.EOF) && n == len(buf)) {
				return nil, fmt.Errorf("upload blob %s: read at %d: %w", sum, off, err)
			}
			q := url.Values{"offset": {strconv.FormatInt(off, 10)}}
			h := http.Header{"Content-Type": {"application/octet-stream"}}
			a, err := c.exchange(ctx, request{method: http.MethodPut, path: path, query: q, body: buf[:n], header: h, idempotent: true})
			var apiErr *Error
			switch {
			case errors.As(err, &apiErr) && apiErr.Status == http.StatusTooManyRequests:
				// A fast link outruns the per-client request rate: chunks
				// are requests. Wait as told and send the chunk again.
				if err := sleepCtx(ctx, max(apiErr.RetryAfter, 100*time.Millisecond)); err != nil {
					return nil, fmt.Errorf("upload blob %s: %w", sum, err)
				}
			case errors.As(err, &apiErr) && apiErr.Status == http.StatusConflict && apiErr.Have != nil:
				// The leader holds a different amount (a new leader, or a
				// resumed upload): go on from there.
				if err := resume(*apiErr.Have, err); err != nil {
					return nil, err
				}
			case err != nil:
				return nil, fmt.Errorf("upload blob %s at %d: %w", sum, off, err)
			default:
				var ans BlobChunkAnswer
				if err := decodeAnswer(a, &ans); err != nil {
					return nil, err
				}
				if ans.Have > size {
					return nil, fmt.Errorf("upload blob %s: the cluster holds %d bytes of a %d-byte file", sum, ans.Have, size)
				}
				off = ans.Have
			}
			if progress != nil {
				progress(off, size)
			}
		}
		info, err := c.commitBlob(ctx, path, sum, size)
		var apiErr *Error
		if errors.As(err, &apiErr) && apiErr.Status == http.StatusConflict && apiErr.Have != nil {
			// The leader changed after the last chunk and holds less.
			if err := resume(*apiErr.Have, err); err != nil {
				return nil, err
			}
			continue
		}
		return info, err
	}
}

// commitBlob commits until durable: each call waits a while for
// replication, and a 202 means it goes on.
func (c *Client) commitBlob(ctx context.Context, path, sum string, size int64) (*BlobInfo, error) {
	q := url.Values{"size": {strconv.FormatInt(size, 10)}}
	for {
		a, err := c.exchange(ctx, request{method: http.MethodPost, path: path + "/commit", query: q, idempotent: true})
		var apiErr *Error
		if errors.As(err, &apiErr) && apiErr.Status == http.StatusTooManyRequests {
			if err := sleepCtx(ctx, max(apiErr.RetryAfter, 100*time.Millisecond)); err != nil {
				return nil, fmt.Errorf("commit blob %s: %w", sum, err)
			}
			continue
		}
		if err != nil {
			if errors.As(err, &apiErr) {
				return nil, err // the caller resumes a short upload
			}
			return nil, fmt.Errorf("commit blob %s: %w", sum, err)
		}
		var info BlobInfo
		if err := decodeAnswer(a, &info); err != nil {
			return nil, err
		}
		if info.Durable {
			return &info, nil
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return nil, fmt.Errorf("commit blob %s: on %d of %d managers when the wait ended: %w", sum, info.Replicas, info.Needed, err)
		}
	}
}

// UploadBytes is UploadBlob for content already in memory.
func (c *Client) UploadBytes(ctx context.Context, b []byte) (string, error) {
	sum := sha256.Sum256(b)
	s := hex.EncodeToString(sum[:])
	if _, err := c.UploadBlob(ctx, s, bytes.NewReader(b), int64(len(b)), nil); err != nil {
		return "", err
	}
	return s, nil
}

// HashFile returns the hex SHA-256 and size of the file at path, reading it
// once in small pieces.
func HashFile(path string) (sum string, size int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// IsNotFound reports whether err is a not_found answer.
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == CodeNotFound
}

// storeInlineData stores data files sent as bytes as blobs (durable before
// the job is) and returns blobs with their names added.
func storeInlineData(ctx context.Context, bb BlobBackend, data map[string][]byte, blobs map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(data)+len(blobs))
	for name, sum := range blobs {
		out[name] = sum
	}
	for name, b := range data {
		h := sha256.Sum256(b)
		sum := hex.EncodeToString(h[:])
		for off := 0; off < len(b); off += MaxBlobChunk {
			end := min(off+MaxBlobChunk, len(b))
			if _, err := bb.PutBlobChunk(ctx, sum, int64(off), b[off:end]); err != nil {
				return nil, fmt.Errorf("data file %s: %w", truncateName(name), err)
			}
		}
		info, err := bb.CommitBlob(ctx, sum, int64(len(b)))
		if err != nil {
			return nil, fmt.Errorf("data file %s: %w", truncateName(name), err)
		}
		if !info.Durable {
			return nil, wire.Errorf(wire.CodeNoQuorum, "data file %s is on %d of the %d managers needed", truncateName(name), info.Replicas, info.Needed)
		}
		out[name] = sum
	}
	return out, nil
}

// uploadDataFiles uploads a job file's data files as blobs (skipping those
// the cluster already holds) and returns their names → sums.
func (c *Client) uploadDataFiles(ctx context.Context, data map[string][]byte) (map[string]string, error) {
	blobs := make(map[string]string, len(data))
	for name, b := range data {
		sum, err := c.UploadBytes(ctx, b)
		if err != nil {
			return nil, fmt.Errorf("data file %s: %w", name, err)
		}
		blobs[name] = sum
	}
	return blobs, nil
}

func isUnsupported(err error) bool {
	var e *Error
	return errors.As(err, &e) && (e.Code == CodeUnsupported || e.Status == http.StatusNotImplemented)
}
