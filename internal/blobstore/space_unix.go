//go:build unix

package blobstore

import (
	"fmt"
	"syscall"
)

// statfs reads the space of the filesystem holding dir: the blocks an
// unprivileged writer may still use, not those kept for root.
func statfs(dir string) (space, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return space{}, fmt.Errorf("statfs %s: %w", dir, err)
	}
	bs := int64(st.Bsize)
	return space{free: int64(st.Bavail) * bs, total: int64(st.Blocks) * bs}, nil
}
