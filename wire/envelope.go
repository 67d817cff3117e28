package wire

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"sync"
	"time"
	"unicode/utf8"
)

// ProtocolVersion is stamped on every envelope. A receiver refuses versions
// it does not speak rather than guessing at their layout. Version 1 was a
// CBOR map; version 2 is the fixed binary layout below.
const ProtocolVersion = 2

// MaxSenderLen bounds the sender id so a hostile header cannot bloat logs or
// the replay guard's memory.
const MaxSenderLen = 255

// maxSealFieldLen bounds the salt and nonce: each carries a one-byte length.
const maxSealFieldLen = 255

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
//
// On the wire it is a fixed binary layout, all integers big-endian:
//
//	offset  size  field
//	0       1     Version (2)
//	1       1     Flags
//	2       2     Type
//	4       4     KeyID
//	8       8     ID
//	16      8     ReplyTo
//	24      1     len(Sender), 1..255
//	25      n     Sender
//	        1     len(Salt), 0..255
//	        s     Salt
//	        1     len(Nonce), 0..255
//	        m     Nonce
//	        rest  Body (the GCM ciphertext and tag, or a plain error's CBOR)
//
// A fixed layout costs a bounds check per field to read, where the CBOR map
// it replaced cost a reflective decode and a copy of every byte string. The
// body runs to the end of the frame, so every envelope has exactly one
// encoding. Decoding never copies the salt, nonce or body: they alias the
// input, which is what lets a receiver open the body in place.
type Envelope struct {
	Version uint8
	KeyID   uint32
	Sender  string
	Type    MsgType
	ID      uint64
	ReplyTo uint64
	Flags   Flags
	Salt    []byte
	Nonce   []byte
	Body    []byte
}

// envelopeFixedLen is the size of the fields before the sender.
const envelopeFixedLen = 25

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

// AppendHeader appends everything of e but its body to dst: a sealer
// appends the ciphertext right after it, into the same buffer.
func (e *Envelope) AppendHeader(dst []byte) ([]byte, error) {
	if len(e.Sender) == 0 || len(e.Sender) > MaxSenderLen {
		return dst, &Error{Code: CodeMalformed, Message: fmt.Sprintf("sender id length %d outside 1..%d", len(e.Sender), MaxSenderLen)}
	}
	if len(e.Salt) > maxSealFieldLen || len(e.Nonce) > maxSealFieldLen {
		return dst, &Error{Code: CodeMalformed, Message: fmt.Sprintf("salt of %d or nonce of %d bytes over %d", len(e.Salt), len(e.Nonce), maxSealFieldLen)}
	}
	dst = append(dst, e.Version, byte(e.Flags))
	dst = binary.BigEndian.AppendUint16(dst, uint16(e.Type))
	dst = binary.BigEndian.AppendUint32(dst, e.KeyID)
	dst = binary.BigEndian.AppendUint64(dst, e.ID)
	dst = binary.BigEndian.AppendUint64(dst, e.ReplyTo)
	dst = append(dst, byte(len(e.Sender)))
	dst = append(dst, e.Sender...)
	dst = append(dst, byte(len(e.Salt)))
	dst = append(dst, e.Salt...)
	dst = append(dst, byte(len(e.Nonce)))
	return append(dst, e.Nonce...), nil
}

// AppendEnvelope appends the encoding of e to dst.
func AppendEnvelope(dst []byte, e *Envelope) ([]byte, error) {
	dst, err := e.AppendHeader(dst)
	if err != nil {
		return dst, err
	}
	return append(dst, e.Body...), nil
}

// EncodeEnvelope encodes e for the wire.
func EncodeEnvelope(e *Envelope) ([]byte, error) {
	return AppendEnvelope(make([]byte, 0, envelopeFixedLen+len(e.Sender)+2+len(e.Salt)+len(e.Nonce)+len(e.Body)), e)
}

// DecodeEnvelope decodes untrusted bytes into an envelope and checks the
// header is well formed. The body stays sealed. Salt, Nonce and Body alias b.
func DecodeEnvelope(b []byte) (*Envelope, error) {
	var e Envelope
	if err := DecodeEnvelopeInto(&e, b); err != nil {
		return nil, err
	}
	return &e, nil
}

// DecodeEnvelopeInto is DecodeEnvelope into a caller's envelope, so a
// stream reader reusing one envelope decodes its frames without
// allocating. On error e is left zero.
func DecodeEnvelopeInto(e *Envelope, b []byte) error {
	// A stream's frames all name the same sender: keep the string e
	// already holds when the bytes match, rather than allocate a copy.
	prevSender := e.Sender
	*e = Envelope{}
	if len(b) > MaxMessageSize {
		return &Error{Code: CodeTooLarge, Message: fmt.Sprintf("envelope of %d bytes exceeds %d", len(b), MaxMessageSize)}
	}
	if len(b) < envelopeFixedLen {
		return malformedEnvelope("%d bytes, shorter than the %d-byte fixed header", len(b), envelopeFixedLen)
	}
	if b[0] != ProtocolVersion {
		return malformedEnvelope("protocol version %d not supported (want %d)", b[0], ProtocolVersion)
	}
	id := binary.BigEndian.Uint64(b[8:])
	if id == 0 {
		return malformedEnvelope("envelope id is zero")
	}
	rest := b[envelopeFixedLen-1:]
	sender, rest, ok := lengthPrefixed(rest)
	if !ok || len(sender) == 0 {
		return malformedEnvelope("sender id length outside 1..%d or past the end", MaxSenderLen)
	}
	if !utf8.Valid(sender) {
		return malformedEnvelope("sender id is not UTF-8")
	}
	salt, rest, ok := lengthPrefixed(rest)
	if !ok {
		return malformedEnvelope("salt runs past the end")
	}
	nonce, body, ok := lengthPrefixed(rest)
	if !ok {
		return malformedEnvelope("nonce runs past the end")
	}
	*e = Envelope{
		Version: b[0],
		Flags:   Flags(b[1]),
		Type:    MsgType(binary.BigEndian.Uint16(b[2:])),
		KeyID:   binary.BigEndian.Uint32(b[4:]),
		ID:      id,
		ReplyTo: binary.BigEndian.Uint64(b[16:]),
		Sender:  internSender(prevSender, sender),
		Salt:    nilIfEmpty(salt),
		Nonce:   nilIfEmpty(nonce),
		Body:    nilIfEmpty(body),
	}
	return nil
}

// lengthPrefixed splits b into a field of one length byte and what follows.
func lengthPrefixed(b []byte) (field, rest []byte, ok bool) {
	if len(b) < 1 || len(b)-1 < int(b[0]) {
		return nil, nil, false
	}
	n := 1 + int(b[0])
	return b[1:n:n], b[n:], true
}

// internSender returns prev if it spells b, else a new string.
func internSender(prev string, b []byte) string {
	if prev == string(b) { // compared without a conversion
		return prev
	}
	return string(b)
}

// nilIfEmpty keeps decode(encode(e)) equal to e for absent fields.
func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

func malformedEnvelope(format string, args ...any) error {
	return &Error{Code: CodeMalformed, Message: "envelope: " + fmt.Sprintf(format, args...)}
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
