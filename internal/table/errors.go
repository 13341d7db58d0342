package table

import "errors"

var (
	// ErrBadRole reports a role name that is not a valid token (see
	// ValidRole).
	ErrBadRole = errors.New("bad role")

	// ErrNotLoopback reports a base URL that is not exactly
	// http://<loopback host>:<port> (see ParseLoopbackBase).
	ErrNotLoopback = errors.New("base url is not a loopback http endpoint")
)
