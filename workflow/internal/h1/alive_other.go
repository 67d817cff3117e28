//go:build !unix

package h1

import "net"

// alive cannot peek without blocking here; the retry rule in Client.Do
// covers a connection the server closed while it was idle.
func alive(net.Conn) bool { return true }
