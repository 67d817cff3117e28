package wire

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"sync"
	"time"
)

// ProtocolVersion is stamped on every envelope. A receiver refuses versions
// it does not speak rather than guessing at their layout.
const ProtocolVersion = 1

// MaxSenderLen bounds the sender id so a hostile header cannot bloat logs or
// the replay guard's memory.
const MaxSenderLen = 255

// Flags qualify an envelope.
type Flags uint8

const (
	// FlagOneWay: no reply is expected.
	FlagOneWay Flags = 1 << iota
	// FlagReply: the envelope answers the request whose ID is in ReplyTo.
	FlagReply
	// FlagPlainError: an unsealed *Error sent by a receiver that could not
	// authenticate the request (wrong secret) or could not read it at all.
	// Callers treat it as an error, never as data, since anyone can forge it.
	FlagPlainError
)

// Envelope is what travels on a stream: a header in the clear (authenticated
// as additional data) and a body sealed with AES-256-GCM under a key derived
// from the cluster secret and Salt.
type Envelope struct {
	Version uint8   `cbor:"1,keyasint"`
	KeyID   uint32  `cbor:"2,keyasint"`
	Sender  string  `cbor:"3,keyasint"`
	Type    MsgType `cbor:"4,keyasint"`
	ID      uint64  `cbor:"5,keyasint"`
	ReplyTo uint64  `cbor:"6,keyasint,omitempty"`
	Flags   Flags   `cbor:"7,keyasint,omitempty"`
	Salt    []byte  `cbor:"8,keyasint,omitempty"`
	Nonce   []byte  `cbor:"9,keyasint,omitempty"`
	Body    []byte  `cbor:"10,keyasint,omitempty"`
}

// AAD appends the header fields that the seal authenticates. Binding the
// type, ids and sender to the ciphertext stops an attacker from replaying a
// body under another header (say, turning a reply into a request). KeyID is
// left out: it picks the key, so a changed id already fails to open, and
// leaving it out lets a sealer choose the key after the header is built.
func (e *Envelope) AAD(dst []byte) []byte {
	dst = append(dst, 't', 'm', 'p', 's', e.Version)
	dst = binary.AppendUvarint(dst, uint64(len(e.Sender)))
	dst = append(dst, e.Sender...)
	dst = binary.BigEndian.AppendUint16(dst, uint16(e.Type))
	dst = binary.BigEndian.AppendUint64(dst, e.ID)
	dst = binary.BigEndian.AppendUint64(dst, e.ReplyTo)
	dst = append(dst, byte(e.Flags))
	return dst
}

// BoundAAD is AAD followed by the recipient's node id and the connection's
// channel binding (a TLS exporter value both ends compute). The transport
// seals and opens with it, so a captured envelope opens only for the node it
// was sent to, and only on the connection it was sent on: not at another
// node, and not at the same node after a reconnect or a restart.
func (e *Envelope) BoundAAD(dst []byte, recipient string, channel []byte) []byte {
	dst = e.AAD(dst)
	dst = binary.AppendUvarint(dst, uint64(len(recipient)))
	dst = append(dst, recipient...)
	return append(dst, channel...)
}

// EncodeEnvelope encodes e for the wire.
func EncodeEnvelope(e *Envelope) ([]byte, error) {
	return Marshal(e)
}

// DecodeEnvelope decodes untrusted bytes into an envelope and checks the
// header is well formed. The body stays sealed.
func DecodeEnvelope(b []byte) (*Envelope, error) {
	if len(b) > MaxMessageSize {
		return nil, &Error{Code: CodeTooLarge, Message: fmt.Sprintf("envelope of %d bytes exceeds %d", len(b), MaxMessageSize)}
	}
	var e Envelope
	if err := Unmarshal(b, &e); err != nil {
		return nil, &Error{Code: CodeMalformed, Message: err.Error()}
	}
	if e.Version != ProtocolVersion {
		return nil, &Error{Code: CodeMalformed, Message: fmt.Sprintf("protocol version %d not supported (want %d)", e.Version, ProtocolVersion)}
	}
	if e.Sender == "" || len(e.Sender) > MaxSenderLen {
		return nil, &Error{Code: CodeMalformed, Message: fmt.Sprintf("sender id length %d outside 1..%d", len(e.Sender), MaxSenderLen)}
	}
	if e.ID == 0 {
		return nil, &Error{Code: CodeMalformed, Message: "envelope id is zero"}
	}
	return &e, nil
}

// Snowflake ids: 42 bits of milliseconds since SnowflakeEpoch, 10 bits of
// node, 12 bits of sequence. The timestamp lets a receiver reject envelopes
// outside the replay window without remembering them forever.
const (
	snowflakeNodeBits = 10
	snowflakeSeqBits  = 12
	snowflakeSeqMask  = 1<<snowflakeSeqBits - 1
)

// SnowflakeEpochUnixMilli is the zero of snowflake timestamps (2024-01-01 UTC).
const SnowflakeEpochUnixMilli = 1704067200000

// SnowflakeTime extracts the send time embedded in id.
func SnowflakeTime(id uint64) time.Time {
	ms := int64(id >> (snowflakeNodeBits + snowflakeSeqBits))
	return time.UnixMilli(SnowflakeEpochUnixMilli + ms)
}

// SnowflakeGenerator issues unique, time-ordered ids for one node.
type SnowflakeGenerator struct {
	now  func() time.Time
	node uint64

	mu     sync.Mutex
	lastMs int64
	seq    uint64
}

// NewSnowflakeGenerator derives the node bits from a hash of nodeID. Two
// nodes may share node bits; replay detection keys on (sender, id), so a
// collision costs nothing.
func NewSnowflakeGenerator(nodeID string, now func() time.Time) *SnowflakeGenerator {
	if now == nil {
		now = time.Now
	}
	h := fnv.New32a()
	h.Write([]byte(nodeID))
	return &SnowflakeGenerator{now: now, node: uint64(h.Sum32()) & (1<<snowflakeNodeBits - 1)}
}

// Next returns a fresh id, never zero and strictly increasing per generator
// even if the wall clock steps backwards (it then runs on the last time seen
// until the clock catches up).
func (g *SnowflakeGenerator) Next() uint64 {
	ms := g.now().UnixMilli() - SnowflakeEpochUnixMilli
	if ms < 1 {
		ms = 1
	}
	g.mu.Lock()
	if ms <= g.lastMs {
		ms = g.lastMs
		g.seq++
		if g.seq > snowflakeSeqMask {
			// 4096 ids in one millisecond: borrow the next millisecond.
			ms++
			g.seq = 0
		}
	} else {
		g.seq = 0
	}
	g.lastMs = ms
	seq := g.seq
	g.mu.Unlock()
	return uint64(ms)<<(snowflakeNodeBits+snowflakeSeqBits) | g.node<<snowflakeSeqBits | seq
}
