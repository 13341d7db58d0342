//go:build !unix

package httpfast

import "net"

// connAlive cannot peek without blocking here: an idle connection the
// instance closed fails its next exchange, which is then retried once.
func connAlive(net.Conn) bool { return true }
