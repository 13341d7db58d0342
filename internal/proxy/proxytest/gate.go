package proxytest

import (
	"context"
	"net/http"
	"sync"
)

// Gate holds an upstream's requests for one path until it is opened: a
// model server kept busy, so that a test can fill a slot and see what
// the next request meets. Use Hook as the upstream's Hooks.OnRequest.
type Gate struct {
	// Entered receives once for each held request as it arrives (up to
	// its buffer; a hook blocks on a full one).
	Entered chan struct{}

	path string
	open chan struct{}
	once sync.Once
}

// NewGate returns a closed Gate for requests to path; depth is Entered's
// buffer.
func NewGate(path string, depth int) *Gate {
	return &Gate{Entered: make(chan struct{}, depth), path: path, open: make(chan struct{})}
}

// Hook holds a request to the gate's path until Open or the request's
// end; requests to other paths pass at once.
func (g *Gate) Hook(ctx context.Context, r *http.Request) {
	if r.URL.Path != g.path {
		return
	}
	g.Entered <- struct{}{}
	select {
	case <-g.open:
	case <-ctx.Done():
	}
}

// Open lets every held and later request through. It may be called more
// than once (a test defers it and also opens it at the point it tests).
func (g *Gate) Open() { g.once.Do(func() { close(g.open) }) }
