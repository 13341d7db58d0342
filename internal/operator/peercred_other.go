//go:build !linux

package operator

import (
	"errors"
	"net"
)

// peerCred is unknown outside Linux: a RefusePeer refuses every peer
// there, and nodeld sets none (it isolates nothing outside Linux).
func peerCred(net.Conn) (int, uint32, error) {
	return 0, 0, errors.New("peer credentials need Linux")
}
