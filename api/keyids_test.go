package api

import (
	"slices"
	"testing"
)

func TestKeyIDs(t *testing.T) {
	for _, tc := range []struct {
		name       string
		send       uint32
		accept     []uint32
		wantSend   string
		wantAccept []string
	}{
		{"unknown", 0, nil, "", nil},
		{"steady", 0x1a2b3c4d, []uint32{0x1a2b3c4d}, "1a2b3c4d", []string{"1a2b3c4d"}},
		{"mid rotation, zero padded", 0xff, []uint32{0xff, 0x1}, "000000ff", []string{"000000ff", "00000001"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			send, accept := KeyIDs(tc.send, tc.accept)
			if send != tc.wantSend || !slices.Equal(accept, tc.wantAccept) {
				t.Fatalf("keyIDs = %q %q, want %q %q", send, accept, tc.wantSend, tc.wantAccept)
			}
		})
	}
}
