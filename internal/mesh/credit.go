package mesh

import (
	"sync"
	"sync/atomic"
	"time"
)

// Stream credit. A peer may hold Config.MaxStreams streams open on a link;
// quic-go gives it a new one (a MAX_STREAMS frame) when one of its streams
// is over. By default it queues that frame the moment the stream completes,
// which on a request/answer link is when the peer's ACK of the answer
// arrives, most often with its next request: the frame then leaves in a
// packet of its own just before that request's answer, and the peer, with
// two packets to acknowledge, sends an ACK of its own. That is two
// datagrams per request on top of the request and its answer, each a
// wake-up of both nodes' connection loops.
//
// The mesh sets quic.Config.RequireStreamCreditRelease and releases the
// credit of a served stream itself: with the next answer written on the
// link (Stream.Write of another accepted stream), so that the frame rides
// in the answer's packet. Credit is never withheld for long: it is
// released at once when creditBatch streams wait, and after
// creditFlushDelay in any case, so a peer never waits on an answer that
// will not come.
const (
	// creditBatch is how many served streams may wait for the next
	// answer before their credit is released at once.
	creditBatch = 16
	// creditFlushDelay bounds how long a served stream's credit waits for
	// the next answer.
	creditFlushDelay = 2 * time.Millisecond
)

// creditReleaser is what a pending stream credit is released on (a
// *quic.Stream).
type creditReleaser interface{ ReleaseStreamCredit() }

// credits holds the stream credit of one connection's served streams until
// it can ride with an answer.
type credits struct {
	n       atomic.Int32 // len(pending), read without mu on every Write
	mu      sync.Mutex
	pending []creditReleaser
	timer   *time.Timer
	armed   bool
}

func newCredits() *credits {
	c := &credits{}
	c.timer = time.AfterFunc(time.Hour, c.flush)
	c.timer.Stop()
	return c
}

// done takes the credit of a stream this side has finished serving: it is
// released with the next answer, or soon anyway.
func (c *credits) done(s creditReleaser) {
	c.mu.Lock()
	c.pending = append(c.pending, s)
	n := len(c.pending)
	c.n.Store(int32(n))
	if n >= creditBatch {
		c.mu.Unlock()
		c.flush()
		return
	}
	if !c.armed {
		c.armed = true
		c.timer.Reset(creditFlushDelay)
	}
	c.mu.Unlock()
}

// beforeWrite releases the waiting credit just before an answer is
// written, so that quic-go packs the frame with it.
func (c *credits) beforeWrite() {
	if c.n.Load() == 0 {
		return
	}
	c.flush()
}

// flush releases every waiting credit.
func (c *credits) flush() {
	c.mu.Lock()
	pending := c.pending
	c.pending = nil
	c.n.Store(0)
	if c.armed {
		c.armed = false
		c.timer.Stop()
	}
	c.mu.Unlock()
	for i, s := range pending {
		s.ReleaseStreamCredit()
		pending[i] = nil
	}
	if cap(pending) <= creditBatch {
		c.mu.Lock()
		if c.pending == nil {
			c.pending = pending[:0]
		}
		c.mu.Unlock()
	}
}
