package transport

import (
	"encoding/binary"
	"fmt"
	"io"

	"tempest/wire"
)

// Frames on a stream are a 4-byte big-endian length followed by one encoded
// envelope (or, first on a connection, a hello). The length is checked
// against the cap before a single body byte is read: CBOR has no byte-string
// cap of its own.
const (
	frameHeaderLen = 4
	// maxFrameLen leaves room for the envelope header, salt, nonce and GCM
	// tag around a body of up to wire.MaxMessageSize.
	maxFrameLen = wire.MaxMessageSize + 1024
	// maxBodyLen is the largest plaintext body a sender will seal.
	maxBodyLen = wire.MaxMessageSize
	// readChunk is how much a frame's buffer grows per step: memory follows
	// the bytes that actually arrived, never the length a peer announced.
	readChunk = 64 << 10
	// keepBufLen is the largest read buffer a stream keeps between frames;
	// a bigger one, grown for a rare large frame, is dropped after it.
	keepBufLen = 1 << 20
)

// errFrameTooLarge is returned by readFrame when a peer announces a frame
// over the cap; the stream cannot be resynchronised after it.
type errFrameTooLarge struct{ n, max uint32 }

func (e errFrameTooLarge) Error() string {
	return fmt.Sprintf("frame of %d bytes exceeds %d", e.n, e.max)
}

// readFrame reads one frame of at most limit bytes into buf (grown as bytes
// arrive) and returns the payload slice, valid until the next call, and the
// buffer to pass to that call.
func readFrame(r io.Reader, buf []byte, limit uint32) ([]byte, []byte, error) {
	if cap(buf) > keepBufLen {
		buf = nil
	}
	var hdr [frameHeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, buf, err
	}
	n := int(binary.BigEndian.Uint32(hdr[:]))
	if uint32(n) > limit {
		return nil, buf, errFrameTooLarge{uint32(n), limit}
	}
	buf = buf[:0]
	for len(buf) < n {
		if len(buf) == cap(buf) {
			// Grow by what has arrived so far (at least a chunk), so a peer
			// that announces 10 MiB and sends 10 bytes costs one chunk.
			grow := min(n, max(cap(buf)*2, readChunk))
			nb := make([]byte, len(buf), grow)
			copy(nb, buf)
			buf = nb
		}
		end := min(n, cap(buf))
		m, err := io.ReadFull(r, buf[len(buf):end])
		buf = buf[:len(buf)+m]
		if err != nil {
			return nil, buf, err
		}
	}
	return buf, buf, nil
}

// appendFrame appends the frame header and payload to dst.
func appendFrame(dst, payload []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(payload)))
	return append(dst, payload...)
}
