package blobstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// FuzzChunks feeds the store chunk sequences as a peer might send them
// (offsets and data are the sender's): whatever arrives, a blob becomes
// visible only with content that hashes to its name, and the bytes held
// never exceed what was written in order.
func FuzzChunks(f *testing.F) {
	f.Add([]byte("hello world"), []byte{0, 0, 5, 0, 5, 0, 11, 0})
	f.Add([]byte("abc"), []byte{0, 0, 9, 0})
	f.Add([]byte(""), []byte{})
	f.Fuzz(func(t *testing.T, content, plan []byte) {
		if len(content) > 1<<16 {
			return
		}
		st, err := Open(t.TempDir(), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		sum := Of(content)
		// plan: pairs of little-endian uint16 (offset, end) into content,
		// sent in that order, possibly out of order or overlapping.
		for len(plan) >= 4 {
			off := int(binary.LittleEndian.Uint16(plan))
			end := int(binary.LittleEndian.Uint16(plan[2:]))
			plan = plan[4:]
			if off > len(content) || end > len(content) || off > end {
				continue
			}
			have, err := st.WriteChunk(sum, int64(off), content[off:end])
			var gap *GapError
			if err != nil && !errors.As(err, &gap) {
				t.Fatal(err)
			}
			if have > int64(len(content)) {
				t.Fatalf("holds %d bytes of a %d-byte blob", have, len(content))
			}
		}
		err = st.Commit(sum, int64(len(content)))
		if err != nil {
			if _, serr := st.Stat(sum); !errors.Is(serr, ErrNotFound) {
				t.Fatalf("commit failed (%v) but the blob is visible", err)
			}
			return
		}
		got := make([]byte, len(content))
		if _, err := st.ReadAt(sum, got, 0); err != nil && len(content) > 0 {
			t.Fatal(err)
		}
		if !bytes.Equal(got, content) {
			t.Fatal("committed blob differs from its content")
		}
	})
}
