package wire

import (
	"errors"
	"fmt"
)

// Batched dispatches and progress reports, between a manager leader and one
// worker. A leader placing many workflows on one worker at once sends their
// dispatches in one message, and a worker reporting on many workflows at
// once sends their progress in one: each carries the same per-workflow
// message as the single types, each is judged on its own (its own fence
// token, its own checks) and answered on its own, in the same order. A lone
// dispatch or report still travels as the single type.

// WorkflowDispatchBatch hands several workflows to one worker. Answered
// with a WorkflowDispatchBatchAck.
type WorkflowDispatchBatch struct {
	Dispatches []WorkflowDispatch `cbor:"1,keyasint"`
}

// WorkflowDispatchBatchAck holds one answer per dispatch of a
// WorkflowDispatchBatch, in its order.
type WorkflowDispatchBatchAck struct {
	Answers []DispatchAnswer `cbor:"1,keyasint"`
}

// DispatchAnswer is the answer a single WorkflowDispatch would have had:
// its ack, or the error it would have been refused with.
type DispatchAnswer struct {
	Ack *WorkflowDispatchAck `cbor:"1,keyasint,omitempty"`
	Err *Error               `cbor:"2,keyasint,omitempty"`
}

// WorkflowProgressBatch carries several progress reports from one worker.
// Answered with a ProgressBatchAck.
type WorkflowProgressBatch struct {
	Reports []WorkflowProgress `cbor:"1,keyasint"`
}

// ProgressBatchAck holds one answer per report of a WorkflowProgressBatch,
// in its order.
type ProgressBatchAck struct {
	Answers []ProgressAnswer `cbor:"1,keyasint"`
}

// ProgressAnswer is the answer a single WorkflowProgress would have had.
type ProgressAnswer struct {
	Ack *ProgressAck `cbor:"1,keyasint,omitempty"`
	Err *Error       `cbor:"2,keyasint,omitempty"`
}

// NotServed reports whether err says the peer does not know the message
// type sent (it runs an older release): a batch's items then go alone.
func NotServed(err error) bool {
	c := CodeOf(err)
	return c == CodeNoHandler || c == CodeUnknownType
}

// Reply is one batched item's result as a lone call would have returned it:
// the reply, or the error.
type Reply struct {
	Msg Message
	Err error
}

func (a DispatchAnswer) reply() Reply { return answerReply(a.Ack, a.Ack != nil, a.Err) }
func (a ProgressAnswer) reply() Reply { return answerReply(a.Ack, a.Ack != nil, a.Err) }

func answerReply(ack Message, acked bool, err *Error) Reply {
	switch {
	case err != nil:
		return Reply{Err: err}
	case acked:
		return Reply{Msg: ack}
	}
	return Reply{Err: errors.New("an answer in a batch reply has neither ack nor error")}
}

// BatchReplies is the result of a batch call of n items (resp and err, as
// the call returned them) as one Reply per item: each item's answer when
// resp is a batch ack holding n answers, else the failure (the call's, or
// what is wrong with resp) for every item.
func BatchReplies(n int, resp Message, err error) []Reply {
	var out []Reply
	if err == nil {
		switch ack := resp.(type) {
		case *WorkflowDispatchBatchAck:
			out = replies(ack.Answers)
		case *ProgressBatchAck:
			out = replies(ack.Answers)
		default:
			err = fmt.Errorf("unexpected reply %T to a batch", resp)
		}
	}
	if err == nil && len(out) != n {
		err = fmt.Errorf("%d answers to a batch of %d", len(out), n)
	}
	if err != nil {
		out = make([]Reply, n)
		for i := range out {
			out[i].Err = err
		}
	}
	return out
}

func replies[A interface{ reply() Reply }](answers []A) []Reply {
	out := make([]Reply, len(answers))
	for i, a := range answers {
		out[i] = a.reply()
	}
	return out
}

func (*WorkflowDispatchBatch) Type() MsgType    { return TypeWorkflowDispatchBatch }
func (*WorkflowDispatchBatchAck) Type() MsgType { return TypeWorkflowDispatchBatchAck }
func (*WorkflowProgressBatch) Type() MsgType    { return TypeWorkflowProgressBatch }
func (*ProgressBatchAck) Type() MsgType         { return TypeProgressBatchAck }

// AsError is err as the typed error a peer receives for it: err itself if
// it is (or wraps) an *Error, else CodeInternal with err's text, clipped.
func AsError(err error) *Error {
	var we *Error
	if errors.As(err, &we) {
		return we
	}
	msg := err.Error()
	if len(msg) > 512 {
		msg = msg[:512]
	}
	return &Error{Code: CodeInternal, Message: msg}
}
