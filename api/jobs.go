package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"

	"tempest/internal/jobfile"
	"tempest/jobs"
	"tempest/wire"
	"tempest/workflow"
)

func (s *Server) submitJob(w http.ResponseWriter, r *http.Request) {
	release, ok := s.awaitParsing(w, r)
	if !ok {
		return
	}
	parsed := false
	defer func() {
		if !parsed {
			release()
		}
	}()
	sub, err := readSubmission(r)
	body, partName, data, blobs := sub.jobFile, sub.partName, sub.data, sub.blobs
	if errors.Is(err, errBadBundle) {
		writeErrorBody(w, http.StatusBadRequest, ErrorBody{Code: CodeMalformed, Error: err.Error()})
		return
	}
	if err != nil {
		s.bodyError(w, err)
		return
	}
	if len(body) == 0 {
		writeErrorBody(w, http.StatusBadRequest, ErrorBody{Code: CodeMalformed,
			Error: "empty body: send a job file (YAML or JSON)"})
		return
	}
	name := r.Header.Get(FilenameHeader)
	if name == "" {
		name = partName
	}
	filename := jobFilename(name)
	// Data files come only from the request, or from blobs uploaded before
	// it: a server never reads its own disk for a client's job file.
	ctx, cancel := s.callContext(r)
	defer cancel()
	bb, _ := s.backend.(BlobBackend)
	if bb != nil && len(data) > 0 {
		// Bytes sent inline become blobs too, so shards share one stored
		// copy instead of carrying one each.
		if blobs, err = storeInlineData(ctx, bb, data, blobs); err != nil {
			s.fail(w, r, fmt.Errorf("store data files: %w", err))
			return
		}
		data = nil
	}
	opts := []jobfile.Option{jobfile.WithDataFiles(blobDataReader(ctx, bb, data, blobs, workflow.MaxDataSize))}
	if len(blobs) > 0 {
		opts = append(opts, jobfile.WithDataBlobs(blobs))
	}
	opts = append(opts, jobfile.WithEnv(mapLookup(sub.env)), jobfile.WithSecrets(mapLookup(sub.secrets)),
		jobfile.WithTLSFiles(func(name string) ([]byte, error) {
			if b, ok := sub.tlsFiles[name]; ok {
				return b, nil
			}
			return nil, fmt.Errorf("%s was not sent with the job file", name)
		}))
	job, err := jobfile.Parse(body, filename, s.cfg.Registry, opts...)
	if err != nil {
		var jfe *jobfile.Error
		if errors.As(err, &jfe) {
			writeErrorBody(w, http.StatusBadRequest, ErrorBody{Code: CodeMalformed,
				Error: problemSummary(filename, len(jfe.Problems)), Problems: jfe.Problems})
			return
		}
		s.fail(w, r, fmt.Errorf("parse %s: %w", filename, err))
		return
	}
	// The body and its parse tree are garbage now; the job itself is
	// bounded by the backend's cap on a job's size.
	parsed = true
	release()
	if key := r.Header.Get(IdempotencyHeader); key != "" && job.JobID == "" {
		id, ok := jobIDFromKey(key)
		if !ok {
			writeErrorBody(w, http.StatusBadRequest, ErrorBody{Code: CodeMalformed,
				Error: IdempotencyHeader + ": want 8 to 64 characters of [A-Za-z0-9_-]"})
			return
		}
		job.JobID = id
	}
	ack, err := s.backend.Submit(ctx, job)
	if we := (*wire.Error)(nil); errors.As(err, &we) && we.Code == wire.CodeRejected && we.Field != "" {
		// Refused for a field of the job file by a node that never saw the
		// file (a manager judging it against its datacenter): answered as
		// the file's own problems are, with the field's line.
		s.log.Info("job refused", "name", job.Name, "field", we.Field, "reason", we.Message)
		writeErrorBody(w, http.StatusConflict, ErrorBody{Code: CodeRejected, Error: filename + " was refused",
			Problems: []Problem{{Line: jobfile.LineOf(body, we.Field), Path: we.Field, Message: we.Message}}})
		return
	}
	if err != nil {
		s.fail(w, r, fmt.Errorf("submit job %q: %w", job.Name, err))
		return
	}
	if ack == nil {
		s.fail(w, r, fmt.Errorf("submit job %q: backend returned no ack", job.Name))
		return
	}
	annotate(w, ack.JobID)
	if !ack.Accepted {
		msg := ack.Error
		if msg == "" {
			msg = "job refused"
		}
		writeErrorBody(w, http.StatusConflict, ErrorBody{Code: CodeRejected, Error: msg})
		return
	}
	s.log.Info("job submitted", "job_id", ack.JobID, "name", job.Name,
		"workflows", len(job.Workflows), "remote", r.RemoteAddr)
	dcs := ack.Datacenters
	if dcs == nil {
		dcs = []string{} // a manager names none: its own datacenter is implied
	}
	w.Header().Set("Location", "/v1/jobs/"+url.PathEscape(ack.JobID))
	writeJSON(w, http.StatusCreated, SubmitResponse{JobID: ack.JobID, Datacenters: dcs,
		QueuedPosition: ack.QueuedPosition})
}

// awaitParsing takes a parsing token (MaxParsing), waiting while every
// token is held, until the request's time is up (503, to retry after a
// second). It returns the token's release.
func (s *Server) awaitParsing(w http.ResponseWriter, r *http.Request) (func(), bool) {
	ctx, cancel := s.callContext(r)
	defer cancel()
	select {
	case s.parsing <- struct{}{}:
		return func() { <-s.parsing }, true
	case <-ctx.Done():
		if r.Context().Err() == nil {
			w.Header().Set("Retry-After", "1")
			writeErrorBody(w, http.StatusServiceUnavailable, ErrorBody{Code: CodeUnavailable,
				Error: fmt.Sprintf("%d job submissions are being parsed; try again", cap(s.parsing))})
		}
		return nil, false
	}
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.callContext(r)
	defer cancel()
	jobs, err := s.backend.Jobs(ctx)
	if err != nil {
		s.fail(w, r, fmt.Errorf("list jobs: %w", err))
		return
	}
	if jobs == nil {
		jobs = []JobStatus{} // "jobs": [], never null
	}
	writeJSON(w, http.StatusOK, JobList{Jobs: jobs})
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	id, ok := jobIDFrom(w, r)
	if !ok {
		return
	}
	ctx, cancel := s.callContext(r)
	defer cancel()
	job, err := s.backend.Job(ctx, id)
	if err != nil {
		s.fail(w, r, fmt.Errorf("get job %s: %w", id, err))
		return
	}
	if job == nil {
		s.fail(w, r, wire.Errorf(wire.CodeNotFound, "job %s not found", id))
		return
	}
	writeJSON(w, http.StatusOK, job)
}

func (s *Server) cancelJob(w http.ResponseWriter, r *http.Request) {
	id, ok := jobIDFrom(w, r)
	if !ok {
		return
	}
	req, err := DecodeCancelRequest(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.bodyError(w, mbe)
			return
		}
		writeErrorBody(w, http.StatusBadRequest, ErrorBody{Code: CodeMalformed, Error: err.Error()})
		return
	}
	reason := req.Reason
	if reason == "" {
		reason = "cancelled by client"
	}
	ctx, cancel := s.callContext(r)
	defer cancel()
	ack, err := s.backend.Cancel(ctx, id, reason)
	if err != nil {
		s.fail(w, r, fmt.Errorf("cancel job %s: %w", id, err))
		return
	}
	if ack == nil {
		s.fail(w, r, fmt.Errorf("cancel job %s: backend returned no ack", id))
		return
	}
	s.log.Info("job cancel requested", "job_id", id, "reason", reason, "cancelled", ack.Cancelled,
		"workflows_cancelled", ack.WorkflowsCancelled, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, CancelResponse{JobID: id, Cancelled: ack.Cancelled,
		WorkflowsCancelled: ack.WorkflowsCancelled})
}

func (s *Server) cluster(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.callContext(r)
	defer cancel()
	view, err := s.backend.Cluster(ctx)
	if err != nil {
		s.fail(w, r, fmt.Errorf("cluster view: %w", err))
		return
	}
	if view == nil {
		view = &ClusterView{}
	}
	if view.Nodes == nil {
		view.Nodes = []NodeView{}
	}
	writeJSON(w, http.StatusOK, view)
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	isLeader, _ := s.backend.Leader()
	writeJSON(w, http.StatusOK, Health{Status: "ok", Role: s.cfg.Role, Leader: isLeader})
}

func (s *Server) metricsText(w http.ResponseWriter, r *http.Request) {
	if s.cfg.MetricsToken != "" && !bearerMatches(r, s.cfg.MetricsToken) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="tempest metrics"`)
		writeErrorBody(w, http.StatusUnauthorized, ErrorBody{Code: CodeUnauthenticated, Error: "/metrics needs the metrics token"})
		return
	}
	s.metricsHandler.ServeHTTP(w, r)
}

func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	writeErrorBody(w, http.StatusNotFound, ErrorBody{Code: CodeNotFound,
		Error: fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path)})
}

// fail answers a backend error. A not-leader error means leadership moved
// between the check in leaderOnly and the call: the client is sent to the
// new leader with 307 (which repeats the method and body) when one is known.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return // the client left; nobody to answer
	}
	a, typed := answerFor(err)
	if !typed {
		s.log.Error("api request failed", "method", r.Method, "path", r.URL.Path,
			"job_id", r.PathValue("id"), "err", err)
	} else {
		s.log.Debug("api request refused", "method", r.Method, "path", r.URL.Path,
			"job_id", r.PathValue("id"), "err", err)
	}
	if a.body.Code == CodeNotLeader {
		// The backend's current view beats the one in the error.
		leaderAPI := a.leaderAPI
		if isLeader, current := s.backend.Leader(); !isLeader && current != "" {
			leaderAPI = current
		}
		switch {
		case leaderAPI == "":
			a.body.Code = CodeNoLeader
		case r.Header.Get(forwardedHeader) == "":
			w.Header().Set("Location", strings.TrimSuffix(leaderAPI, "/")+r.URL.RequestURI())
			a.status = http.StatusTemporaryRedirect
		}
	}
	if a.retryAfter > 0 {
		w.Header().Set("Retry-After", retryAfterHeader(a.retryAfter))
	}
	writeErrorBody(w, a.status, a.body)
}

func (s *Server) bodyError(w http.ResponseWriter, err error) {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		writeErrorBody(w, http.StatusRequestEntityTooLarge, ErrorBody{Code: CodeTooLarge,
			Error: "request body larger than the " + formatBytes(mbe.Limit) + " allowed"})
		return
	}
	writeErrorBody(w, http.StatusBadRequest, ErrorBody{Code: CodeMalformed,
		Error: "read request body: " + err.Error()})
}

// jobIDFrom takes the {id} path value, refusing what no backend could have
// issued (so it never reaches logs or lookups).
func jobIDFrom(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if err := jobs.CheckID(id); err != nil {
		writeErrorBody(w, http.StatusBadRequest, ErrorBody{Code: CodeMalformed, Error: err.Error()})
		return "", false
	}
	return id, true
}

// jobFilename is the client's name for its job file, reduced to a short
// base name: it only labels problems.
func jobFilename(h string) string {
	h = strings.TrimSpace(h)
	if h == "" {
		return "job file"
	}
	h = path.Base(strings.ReplaceAll(h, `\`, "/"))
	h = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, h)
	if len(h) > 128 {
		h = strings.ToValidUTF8(h[:128], "")
	}
	if h == "" || h == "." || h == "/" {
		return "job file"
	}
	return h
}

func problemSummary(filename string, n int) string {
	if n == 1 {
		return filename + " has 1 problem"
	}
	return fmt.Sprintf("%s has %d problems", filename, n)
}

// IdempotencyHeader carries a client-chosen key that names the job, so a
// submission re-sent after a lost answer does not make a second job. Go's
// HTTP client also treats requests carrying it as safe to retry on a broken
// keep-alive connection.
const IdempotencyHeader = "Idempotency-Key"

// jobIDFromKey turns an idempotency key into the job id it stands for.
func jobIDFromKey(key string) (string, bool) {
	if len(key) < 8 || len(key) > 64 {
		return "", false
	}
	for _, r := range key {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return "", false
		}
	}
	return "j-" + key, true
}

// mapLookup looks names up in m (nil: none are set).
func mapLookup(m map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}
