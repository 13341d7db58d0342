//go:build !unix

package httpfast

import "net"

// ConnAlive cannot peek without blocking here: an idle connection the
// peer closed fails its next exchange (the upstream pool retries it once).
func ConnAlive(net.Conn) bool { return true }
