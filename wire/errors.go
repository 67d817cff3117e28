package wire

import (
	"errors"
	"fmt"
	"time"
)

// Code classifies an Error so callers can branch without parsing text.
type Code uint16

const (
	CodeUnknown         Code = 0
	CodeMalformed       Code = 1  // body or envelope could not be decoded
	CodeTooLarge        Code = 2  // frame exceeded MaxMessageSize
	CodeUnknownType     Code = 3  // type not in this node's catalogue
	CodeNoHandler       Code = 4  // known type, but this node does not serve it
	CodeUnauthenticated Code = 5  // envelope did not open with any accepted key
	CodeRateLimited     Code = 6  // try again after RetryAfter
	CodeNotLeader       Code = 7  // Leader names who to ask instead
	CodeStaleFence      Code = 8  // fence token older than one already seen
	CodeNoQuorum        Code = 9  // not enough peers confirmed
	CodeUnavailable     Code = 10 // shutting down, draining, or overloaded
	CodeInternal        Code = 11 // handler failed; text is sanitized
	CodeNotFound        Code = 12
	CodeRejected        Code = 13 // request understood and refused
	// CodeOutcomeUnknown: a write may or may not have taken effect (it
	// reached some peers, not a majority, and could not be withdrawn);
	// re-sending it under the same idempotency key finds it or makes it.
	CodeOutcomeUnknown Code = 20
	// CodeInsufficientStorage: the write would cross the node's free-space
	// floor or a storage quota (the API answers 507); nothing was written.
	CodeInsufficientStorage Code = 21
)

func (c Code) String() string {
	switch c {
	case CodeMalformed:
		return "malformed"
	case CodeTooLarge:
		return "too_large"
	case CodeUnknownType:
		return "unknown_type"
	case CodeNoHandler:
		return "no_handler"
	case CodeUnauthenticated:
		return "unauthenticated"
	case CodeRateLimited:
		return "rate_limited"
	case CodeNotLeader:
		return "not_leader"
	case CodeStaleFence:
		return "stale_fence"
	case CodeNoQuorum:
		return "no_quorum"
	case CodeUnavailable:
		return "unavailable"
	case CodeInternal:
		return "internal"
	case CodeNotFound:
		return "not_found"
	case CodeRejected:
		return "rejected"
	case CodeOutcomeUnknown:
		return "outcome_unknown"
	case CodeInsufficientStorage:
		return "insufficient_storage"
	}
	return fmt.Sprintf("code(%d)", uint16(c))
}

// Error is the typed error reply. It travels as a message (TypeError) and is
// also a Go error, so a handler can return one and the caller receives it
// unchanged.
type Error struct {
	Code    Code   `cbor:"1,keyasint"`
	Message string `cbor:"2,keyasint,omitempty"`
	// RetryAfter is set with CodeRateLimited and CodeUnavailable.
	RetryAfter time.Duration `cbor:"3,keyasint,omitempty"`
	// Leader is the node id (and Addr its address) to redirect to with CodeNotLeader.
	Leader     string `cbor:"4,keyasint,omitempty"`
	LeaderAddr string `cbor:"5,keyasint,omitempty"`
	// Field names the job-file field a rejected submission is refused for,
	// as the job file's problems name paths
	// ("workflows[0].stages[1].tasks"), so the API can answer with its
	// line.
	Field string `cbor:"6,keyasint,omitempty"`
}

func (*Error) Type() MsgType { return TypeError }

func (e *Error) Error() string {
	s := e.Code.String()
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.RetryAfter > 0 {
		s += fmt.Sprintf(" (retry after %s)", e.RetryAfter)
	}
	if e.Leader != "" {
		s += fmt.Sprintf(" (leader %s at %s)", e.Leader, e.LeaderAddr)
	}
	return s
}

// Is lets errors.Is(err, &Error{Code: X}) match on code alone, and lets
// errors.Is(err, ErrTooLarge) match an Error with CodeTooLarge.
func (e *Error) Is(target error) bool {
	if target == ErrTooLarge {
		return e.Code == CodeTooLarge
	}
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Message == ""
}

// Sentinels for errors.Is checks against a code.
var (
	ErrMalformed       = &Error{Code: CodeMalformed}
	ErrUnauthenticated = &Error{Code: CodeUnauthenticated}
	ErrRateLimited     = &Error{Code: CodeRateLimited}
	ErrNotLeader       = &Error{Code: CodeNotLeader}
	ErrStaleFence      = &Error{Code: CodeStaleFence}
	ErrNoQuorum        = &Error{Code: CodeNoQuorum}
	ErrOutcomeUnknown  = &Error{Code: CodeOutcomeUnknown}
	ErrUnavailable     = &Error{Code: CodeUnavailable}
	ErrNoHandler       = &Error{Code: CodeNoHandler}
)

// CodeOf extracts the Code of err, or CodeUnknown if err carries none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeUnknown
}

// Errorf builds a typed error.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}
