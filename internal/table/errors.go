package table

import "errors"

var (
	// ErrBadRole reports a role name that is not a grammar.ValidName.
	ErrBadRole = errors.New("bad role")

	// ErrNotLoopback reports a base URL that grammar.ParseLoopbackURL
	// refuses: not exactly http://<loopback host>:<port>.
	ErrNotLoopback = errors.New("base url is not a loopback http endpoint")
)
