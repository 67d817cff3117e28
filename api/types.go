package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"tempest/internal/jobfile"
)

// Problem is one thing wrong with a submitted job file: line, field path and
// message, exactly as jobfile reports it.
type Problem = jobfile.Problem

// Error codes in JSON error bodies. Most are wire.Code names, so a typed
// error keeps its name from the manager's wire to the client; the rest exist
// only at the HTTP layer.
const (
	CodeMalformed       = "malformed"       // 400: bad job file, bad parameter or body
	CodeUnauthenticated = "unauthenticated" // 401: missing or wrong bearer token
	CodeNotFound        = "not_found"       // 404
	CodeRejected        = "rejected"        // 409: understood and refused
	CodeStaleFence      = "stale_fence"     // 409
	CodeTooLarge        = "too_large"       // 413
	CodeRateLimited     = "rate_limited"    // 429, with Retry-After
	CodeInternal        = "internal"        // 500
	CodeBadGateway      = "bad_gateway"     // 502: the leader failed mid-request; it may have run
	CodeNotLeader       = "not_leader"      // 503 (or 307 to the leader)
	CodeNoLeader        = "no_leader"       // 503: this node follows and knows no leader
	CodeNoQuorum        = "no_quorum"       // 503
	// CodeOutcomeUnknown (503): the cluster could not tell whether it
	// stored the submission; re-sending it with the same Idempotency-Key
	// is safe and finds or makes the one job.
	CodeOutcomeUnknown = "outcome_unknown"
	CodeUnavailable    = "unavailable" // 503: shutting down, overloaded, leader unreachable
	CodeUnsupported    = "unsupported" // 501: this node does not serve that (blobs on a gate)
	// CodeInsufficientStorage (507): the write would cross the node's
	// free-space floor or a storage quota; nothing was stored.
	CodeInsufficientStorage = "insufficient_storage"
)

// SubmitResponse answers POST /v1/jobs.
type SubmitResponse struct {
	JobID          string   `json:"job_id"`
	Datacenters    []string `json:"datacenters"`
	QueuedPosition int      `json:"queued_position,omitempty"`
}

// JobList answers GET /v1/jobs.
type JobList struct {
	Jobs []JobStatus `json:"jobs"`
}

// CancelRequest is the optional body of POST /v1/jobs/{id}/cancel.
type CancelRequest struct {
	Reason string `json:"reason,omitempty"`
}

// CancelResponse answers POST /v1/jobs/{id}/cancel.
type CancelResponse struct {
	JobID              string `json:"job_id"`
	Cancelled          bool   `json:"cancelled"`
	WorkflowsCancelled int    `json:"workflows_cancelled"`
}

// Health answers GET /healthz.
type Health struct {
	Status string `json:"status"`
	Role   string `json:"role,omitempty"`
	Leader bool   `json:"leader"`
}

// ErrorBody is the JSON body of every error answer.
type ErrorBody struct {
	Error    string    `json:"error"`
	Code     string    `json:"code"`
	Problems []Problem `json:"problems,omitempty"`
	// Leader names the leader's node id with not_leader, when known.
	Leader string `json:"leader,omitempty"`
	// Have is a refused blob chunk's answer: the bytes the upload holds,
	// where the client resumes.
	Have *int64 `json:"have,omitempty"`
}

// maxCancelReason bounds a client-supplied cancel reason: it is logged and
// stored with the job, so it must stay small.
const maxCancelReason = 512

// DecodeCancelRequest reads the optional cancel body. An empty body is a
// cancel without a reason. The body comes from any client, so unknown
// fields, trailing data and oversized reasons are refused.
func DecodeCancelRequest(r io.Reader) (CancelRequest, error) {
	var req CancelRequest
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		if errors.Is(err, io.EOF) {
			return CancelRequest{}, nil
		}
		return CancelRequest{}, fmt.Errorf("cancel body: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return CancelRequest{}, errors.New("cancel body: trailing data after the JSON object")
	}
	req.Reason = strings.TrimSpace(req.Reason)
	if len(req.Reason) > maxCancelReason {
		return CancelRequest{}, fmt.Errorf("cancel body: reason is %d bytes, more than the %d allowed", len(req.Reason), maxCancelReason)
	}
	return req, nil
}
