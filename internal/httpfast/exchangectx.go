package httpfast

import (
	"context"
	"sync"
	"time"
)

// Context is the context of one exchange on the fast reader: what
// context.WithCancelCause(context.Background()) gives, at a fraction of
// its cost on the hot path. It has no parent, so it is a root of its own
// tree; its Done channel is made only when asked for; AfterFunc
// registers a function without the goroutine-free but allocating
// machinery of context.AfterFunc (the context package uses this method
// for children and AfterFunc on it too). The local path uses it directly
// as the forwarded request's context: the watchdog cancels it with its
// cause, the fast reader when the client goes away, the server when it
// stops.
type Context struct {
	mu    sync.Mutex // guards the fields below
	done  chan struct{}
	err   error
	cause error
	next  uint64 // id of the next registered function
	fns   []ctxFunc
	inl   [2]ctxFunc // fns' first backing array
	// ct is the timer of its connection a Watchdog started on it uses;
	// nil off the fast reader (NewContext).
	ct *ConnTimer
}

type ctxFunc struct {
	id uint64
	f  func() // or, when nil, n (Register)
	n  Notified
}

// Notified is told, on its own goroutine, that the Context it was
// registered with (Register) was cancelled.
type Notified interface{ ContextDone() }

// closedDone is the Done channel of a context cancelled before anyone
// asked for it.
var closedDone = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// NewContext returns a Context of its own, not yet cancelled: the root
// of an exchange's tree outside the fast reader (a mesh exchange served
// over TCP), cancelled by its owner.
func NewContext() *Context { return newExchangeCtx() }

func newExchangeCtx() *Context {
	c := &Context{}
	c.init()
	return c
}

// init readies a zero Context.
func (c *Context) init() { c.fns = c.inl[:0] }

// Init readies c, a zero Context not yet used, as NewContext's: one
// its owner holds in its own struct costs no allocation of its own.
func (c *Context) Init() { c.init() }

func (c *Context) Deadline() (time.Time, bool) { return time.Time{}, false }

func (c *Context) Value(any) any { return nil }

func (c *Context) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		if c.err != nil {
			c.done = closedDone
		} else {
			c.done = make(chan struct{})
		}
	}
	return c.done
}

func (c *Context) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Cause is context.Cause for this context: the cause it was cancelled
// with (context.Canceled when none was given), nil while it is not.
func (c *Context) Cause() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cause
}

// Cancel cancels the context with cause (nil: context.Canceled); the
// first call wins. Registered functions run, each on its own goroutine.
func (c *Context) Cancel(cause error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = context.Canceled
	if cause == nil {
		cause = context.Canceled
	}
	c.cause = cause
	if c.done == nil {
		c.done = closedDone
	} else {
		close(c.done)
	}
	fns := c.fns
	c.fns = nil
	c.mu.Unlock()
	for _, fn := range fns {
		if fn.f != nil {
			go fn.f()
		} else {
			go fn.n.ContextDone()
		}
	}
}

// AfterFunc arranges for f to run on its own goroutine once c is
// cancelled (at once if it is), as context.AfterFunc does; stop
// unregisters it and reports whether it did so before f was started.
func (c *Context) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	c.next++
	id := c.next
	c.fns = append(c.fns, ctxFunc{id: id, f: f})
	c.mu.Unlock()
	return func() bool { return c.unregister(id) }
}

// Register is AfterFunc for n.ContextDone, with an id for Unregister in
// place of the stop function: it allocates nothing (n is most often a
// pointer its caller holds anyway), where AfterFunc's stop function, and
// the closure a caller makes for it, are an allocation each a request.
// Id 0 means c was cancelled already: n.ContextDone was started.
func (c *Context) Register(n Notified) (id uint64) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		go n.ContextDone()
		return 0
	}
	c.next++
	id = c.next
	c.fns = append(c.fns, ctxFunc{id: id, n: n})
	c.mu.Unlock()
	return id
}

// Unregister undoes Register's id and reports whether it did so before
// its ContextDone was started, as AfterFunc's stop does.
func (c *Context) Unregister(id uint64) bool {
	if id == 0 {
		return false
	}
	return c.unregister(id)
}

func (c *Context) unregister(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, fn := range c.fns {
		if fn.id == id {
			n := len(c.fns)
			copy(c.fns[i:], c.fns[i+1:])
			c.fns[n-1] = ctxFunc{}
			c.fns = c.fns[:n-1]
			return true
		}
	}
	return false
}

// Cause is context.Cause, knowing Context.
func Cause(ctx context.Context) error {
	if c, ok := ctx.(*Context); ok {
		return c.Cause()
	}
	return context.Cause(ctx)
}
