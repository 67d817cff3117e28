//go:build unix

package h1

import (
	"crypto/tls"
	"errors"
	"net"
	"syscall"
)

// alive reports whether an idle connection is still open and quiet: a
// non-blocking peek finds nothing to read. A server that closed it (EOF, or
// a TLS close_notify waiting to be read) or sent bytes nobody asked for
// makes it unfit for the next request.
func alive(c net.Conn) bool {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true // cannot tell; the retry rule covers a closed one
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	quiet := false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, perr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		quiet = errors.Is(perr, syscall.EAGAIN)
		return true // one look, never wait
	})
	return err == nil && quiet
}
