// Package wire owns every message that crosses a node boundary in Tempest:
// the catalogue of typed messages, the sealed envelope that carries them, the
// CBOR codec with limits suited to untrusted input, and the typed error reply.
// It imports nothing else from Tempest; every other package imports it.
package wire

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/fxamacker/cbor/v2"
)

// Size limits shared by every decoder of untrusted bytes. CBOR itself has no
// cap on byte-string length, so frames are length-checked before decoding.
const (
	// MaxMessageSize bounds one sealed envelope on the wire.
	MaxMessageSize = 10 << 20
	// MaxDecompressedSize bounds a body after decompression, if a body is
	// ever compressed (none are today; the limit is part of the contract).
	MaxDecompressedSize = 100 << 20

	maxNestedLevels  = 16
	maxArrayElements = 1 << 20
	maxMapPairs      = 1 << 16
)

var (
	// encMode writes canonical CBOR (sorted integer keys, shortest forms) so
	// equal messages are equal bytes: handy for tests and dedupe.
	encMode cbor.UserBufferEncMode
	// decMode is the strict decoder used for anything that came off a socket.
	decMode cbor.DecMode
)

func init() {
	var err error
	encMode, err = cbor.CoreDetEncOptions().UserBufferEncMode()
	if err != nil {
		panic(fmt.Sprintf("wire: cbor enc mode: %v", err))
	}
	decMode, err = cbor.DecOptions{
		DupMapKey:        cbor.DupMapKeyEnforcedAPF,
		MaxNestedLevels:  maxNestedLevels,
		MaxArrayElements: maxArrayElements,
		MaxMapPairs:      maxMapPairs,
		IndefLength:      cbor.IndefLengthForbidden,
		TagsMd:           cbor.TagsForbidden,
		// A newer peer may add fields; the contract says they are ignored.
		ExtraReturnErrors: cbor.ExtraDecErrorNone,
		UTF8:              cbor.UTF8RejectInvalid,
	}.DecMode()
	if err != nil {
		panic(fmt.Sprintf("wire: cbor dec mode: %v", err))
	}
}

// ErrTooLarge is returned when bytes exceed MaxMessageSize before decoding.
var ErrTooLarge = errors.New("message too large")

// Marshal encodes v as deterministic CBOR.
func Marshal(v any) ([]byte, error) {
	b, err := encMode.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("cbor encode %T: %w", v, err)
	}
	return b, nil
}

// MarshalTo appends the deterministic CBOR of v to buf: the transport
// encodes bodies into pooled buffers instead of a fresh slice per message.
func MarshalTo(buf *bytes.Buffer, v any) error {
	if err := encMode.MarshalToBuffer(v, buf); err != nil {
		return fmt.Errorf("cbor encode %T: %w", v, err)
	}
	return nil
}

// Unmarshal decodes untrusted CBOR into v with the strict decode mode. The
// input must be exactly one CBOR item; trailing bytes are an error.
func Unmarshal(data []byte, v any) error {
	if len(data) > MaxMessageSize {
		return fmt.Errorf("cbor decode %T: %d bytes: %w", v, len(data), ErrTooLarge)
	}
	if err := decMode.Unmarshal(data, v); err != nil {
		return fmt.Errorf("cbor decode %T: %w", v, err)
	}
	return nil
}
