package swim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"tempest/wire"
)

// StateEmbedder lets a role piggyback its heartbeat on SWIM acks without the
// swim package knowing what a heartbeat is.
//
// Both methods run inline on memberlist's goroutines (LocalState on the
// packet handler while an ack is being built, PeerState on the probe loop),
// so they must return in microseconds and must never block: LocalState
// should hand back bytes encoded ahead of time, and PeerState should decode,
// check the version and store, leaving any real work to the role's own
// goroutines. Neither may call Node.Shutdown or Node.Leave.
type StateEmbedder interface {
	// LocalState returns the payload for this node's next ack, at most
	// MaxStateSize bytes (larger payloads are dropped and logged), or nil.
	LocalState() []byte
	// PeerState receives the payload a peer put in its ack to one of this
	// node's direct probes, with the probe's round-trip time. It is not
	// called when the peer sent no payload. The bytes are untrusted.
	PeerState(node NodeInfo, state []byte, rtt time.Duration)
}

// MaxStateSize caps an embedded state payload. An ack carries the payload
// plus memberlist's header, compression framing and, when encrypted, 29 bytes
// of AES-GCM overhead; 1 KiB keeps the whole ack inside memberlist's
// 1400-byte UDP buffer and below a typical 1500-byte MTU, so it is never
// fragmented.
const MaxStateSize = 1024

// ErrStateTooLarge is returned when a state payload exceeds MaxStateSize.
var ErrStateTooLarge = errors.New("embedded state too large")

// ErrStateType is returned when a payload holds a different message type
// than the decoder expects (a manager's heartbeat where a worker's was
// expected).
var ErrStateType = errors.New("embedded state of unexpected type")

// A payload is a 2-byte big-endian wire.MsgType followed by the CBOR body.
// Managers and workers share a cluster, so a prober may receive either kind;
// the prefix makes a mix-up an error rather than a plausible-looking
// misdecode (the two heartbeats' CBOR keys overlap).
const stateHeaderSize = 2

// EncodeWorkerHeartbeat encodes a worker heartbeat as an ack payload.
func EncodeWorkerHeartbeat(hb *wire.WorkerHeartbeat) ([]byte, error) {
	return encodeState(hb)
}

// DecodeWorkerHeartbeat decodes an untrusted ack payload holding a worker
// heartbeat.
func DecodeWorkerHeartbeat(b []byte) (*wire.WorkerHeartbeat, error) {
	hb := new(wire.WorkerHeartbeat)
	if err := decodeState(b, hb); err != nil {
		return nil, err
	}
	return hb, nil
}

// EncodeManagerHeartbeat encodes a manager heartbeat as an ack payload.
func EncodeManagerHeartbeat(hb *wire.ManagerHeartbeat) ([]byte, error) {
	return encodeState(hb)
}

// DecodeManagerHeartbeat decodes an untrusted ack payload holding a manager
// heartbeat.
func DecodeManagerHeartbeat(b []byte) (*wire.ManagerHeartbeat, error) {
	hb := new(wire.ManagerHeartbeat)
	if err := decodeState(b, hb); err != nil {
		return nil, err
	}
	return hb, nil
}

// StateType reports which message an ack payload holds, so a prober that
// receives both kinds can pick the decoder without trusting the peer's role.
func StateType(b []byte) (wire.MsgType, error) {
	if len(b) < stateHeaderSize {
		return wire.TypeInvalid, fmt.Errorf("embedded state: %d bytes, shorter than its header", len(b))
	}
	return wire.MsgType(binary.BigEndian.Uint16(b)), nil
}

func encodeState(m wire.Message) ([]byte, error) {
	body, err := wire.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode %s state: %w", m.Type(), err)
	}
	if n := stateHeaderSize + len(body); n > MaxStateSize {
		return nil, fmt.Errorf("encode %s state: %d bytes, limit %d: %w", m.Type(), n, MaxStateSize, ErrStateTooLarge)
	}
	b := make([]byte, stateHeaderSize, stateHeaderSize+len(body))
	binary.BigEndian.PutUint16(b, uint16(m.Type()))
	return append(b, body...), nil
}

func decodeState(b []byte, m wire.Message) error {
	if len(b) > MaxStateSize {
		return fmt.Errorf("decode %s state: %d bytes, limit %d: %w", m.Type(), len(b), MaxStateSize, ErrStateTooLarge)
	}
	t, err := StateType(b)
	if err != nil {
		return fmt.Errorf("decode %s state: %w", m.Type(), err)
	}
	if t != m.Type() {
		return fmt.Errorf("decode %s state: payload holds %s: %w", m.Type(), t, ErrStateType)
	}
	if err := wire.Unmarshal(b[stateHeaderSize:], m); err != nil {
		return fmt.Errorf("decode %s state: %w", m.Type(), err)
	}
	return nil
}
