package transport

import (
	"encoding/binary"
	"fmt"
	"io"

	"tempest/wire"
)

// Frames on a stream are a 4-byte big-endian length followed by one encoded
// envelope. The length is checked against the cap before a single body byte
// is read or allocated: CBOR has no byte-string cap of its own.
const (
	frameHeaderLen = 4
	// maxFrameLen leaves room for the envelope header, salt, nonce and GCM
	// tag around a body of up to wire.MaxMessageSize.
	maxFrameLen = wire.MaxMessageSize + 1024
	// maxBodyLen is the largest plaintext body a sender will seal.
	maxBodyLen = wire.MaxMessageSize
)

// errFrameTooLarge is returned by readFrame when a peer announces a frame
// over the cap; the stream cannot be resynchronised after it.
type errFrameTooLarge struct{ n uint32 }

func (e errFrameTooLarge) Error() string {
	return fmt.Sprintf("frame of %d bytes exceeds %d", e.n, maxFrameLen)
}

// readFrame reads one frame into buf (grown if needed) and returns the
// payload slice, valid until the next call.
func readFrame(r io.Reader, buf []byte) ([]byte, []byte, error) {
	var hdr [frameHeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, buf, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxFrameLen {
		return nil, buf, errFrameTooLarge{n}
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, buf, err
	}
	return buf, buf, nil
}

// appendFrame appends the frame header and payload to dst.
func appendFrame(dst, payload []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(payload)))
	return append(dst, payload...)
}
