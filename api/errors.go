package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"tempest/wire"
)

// Error is an error answer from the API, as the client sees it. Callers
// branch on Code (the Code* constants) rather than on Status or text.
type Error struct {
	Status   int    // HTTP status
	Code     string // CodeNotFound, CodeNoQuorum, ...
	Message  string
	Problems []Problem // with CodeMalformed for a bad job file
	// RetryAfter comes from the Retry-After header (429, some 503s).
	RetryAfter time.Duration
	// Leader is the leader's node id with CodeNotLeader, when known.
	Leader string
	// Endpoint is the base URL that answered.
	Endpoint string
	// Have is a refused blob chunk's count of bytes held (409).
	Have *int64
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Message)
	if b.Len() == 0 {
		b.WriteString(http.StatusText(e.Status))
	}
	if e.Code != "" {
		fmt.Fprintf(&b, " (%s", e.Code)
		if e.RetryAfter > 0 {
			fmt.Fprintf(&b, ", retry after %s", e.RetryAfter)
		}
		b.WriteByte(')')
	}
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

// errorAnswer is what the server writes for an error.
type errorAnswer struct {
	status     int
	body       ErrorBody
	retryAfter time.Duration
	// leaderAPI is a not-leader error's LeaderAddr when it is an API URL
	// (a backend may name the leader's API there rather than its QUIC
	// address).
	leaderAPI string
}

// answerFor maps an error from the backend (or the HTTP layer) to a status
// and body. Typed *wire.Error codes map to the statuses a client can act on;
// anything untyped is an internal error whose text stays in the server log,
// since it may carry details a client has no business seeing.
func answerFor(err error) (errorAnswer, bool) {
	var we *wire.Error
	switch {
	case errors.As(err, &we):
	case errors.Is(err, context.DeadlineExceeded):
		return errorAnswer{status: http.StatusServiceUnavailable,
			body: ErrorBody{Code: CodeUnavailable, Error: "the request timed out"}}, true
	default:
		return errorAnswer{status: http.StatusInternalServerError,
			body: ErrorBody{Code: CodeInternal, Error: "internal error"}}, false
	}
	a := errorAnswer{body: ErrorBody{Code: we.Code.String(), Error: we.Message}, retryAfter: we.RetryAfter}
	if a.body.Error == "" {
		a.body.Error = we.Code.String()
	}
	switch we.Code {
	case wire.CodeMalformed:
		a.status = http.StatusBadRequest
	case wire.CodeUnauthenticated:
		a.status = http.StatusUnauthorized
	case wire.CodeNotFound:
		a.status = http.StatusNotFound
	case wire.CodeRejected, wire.CodeStaleFence:
		a.status = http.StatusConflict
	case wire.CodeTooLarge:
		a.status = http.StatusRequestEntityTooLarge
	case wire.CodeRateLimited:
		a.status = http.StatusTooManyRequests
		if a.retryAfter <= 0 {
			a.retryAfter = time.Second
		}
	case wire.CodeNotLeader:
		a.status = http.StatusServiceUnavailable
		a.body.Leader = we.Leader
		if strings.HasPrefix(we.LeaderAddr, "http://") || strings.HasPrefix(we.LeaderAddr, "https://") {
			a.leaderAPI = we.LeaderAddr
		}
	case wire.CodeNoQuorum, wire.CodeUnavailable:
		a.status = http.StatusServiceUnavailable
	case wire.CodeInsufficientStorage:
		a.status = http.StatusInsufficientStorage
	case wire.CodeOutcomeUnknown:
		a.status = http.StatusServiceUnavailable
		if a.retryAfter <= 0 {
			a.retryAfter = time.Second
		}
	default:
		// Internal, and codes that only make sense node to node (unknown
		// type, no handler): the client cannot act on them.
		a.status = http.StatusInternalServerError
		a.body.Code = CodeInternal
	}
	return a, true
}

// retryAfterHeader renders d as whole seconds, rounded up: Retry-After has
// no finer unit, and rounding down would invite a retry that is refused.
func retryAfterHeader(d time.Duration) string {
	s := int64((d + time.Second - 1) / time.Second)
	return strconv.FormatInt(max(s, 1), 10)
}

// parseRetryAfter reads a Retry-After header in seconds (the form this
// server writes; HTTP dates are not used here).
func parseRetryAfter(h string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(h))
	if err != nil || n < 0 {
		return 0
	}
	return time.Duration(min(n, 3600)) * time.Second
}
