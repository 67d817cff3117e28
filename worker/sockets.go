package worker

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
)

// establishedTCP counts the TCP connections this process holds in the
// ESTABLISHED state: its socket inodes (from /proc/self/fd) that the
// kernel's TCP tables list as established. It sees every connection the
// load generator opens, whichever HTTP client opened it, without a hook in
// each client.
func establishedTCP() (int, error) {
	if runtime.GOOS != "linux" {
		return 0, errUnsupported
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, fmt.Errorf("count connections: %w", err)
	}
	mine := make(map[string]struct{}, len(fds))
	for _, fd := range fds {
		target, err := os.Readlink("/proc/self/fd/" + fd.Name())
		if err != nil {
			continue // closed since the listing
		}
		if inode, ok := strings.CutPrefix(target, "socket:["); ok {
			mine[strings.TrimSuffix(inode, "]")] = struct{}{}
		}
	}
	n := 0
	for _, table := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		c, err := countEstablished(table, mine)
		if err != nil {
			return 0, err
		}
		n += c
	}
	return n, nil
}

// countEstablished reads one /proc/net/tcp table: after a header line, one
// socket per line, field 3 its state (01 is ESTABLISHED), field 9 its inode.
func countEstablished(path string, inodes map[string]struct{}) (int, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return 0, nil // no IPv6 in this kernel
	}
	if err != nil {
		return 0, fmt.Errorf("count connections: %w", err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != "01" {
			continue
		}
		if _, ok := inodes[fields[9]]; ok {
			n++
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("count connections: read %s: %w", path, err)
	}
	return n, nil
}
