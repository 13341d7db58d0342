package meshproxy

import (
	"context"
	"errors"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nodeld/nodeld/internal/httpfast"
	"github.com/nodeld/nodeld/internal/mesh"
)

// TestServedConnIdleWaitRearmed: a served connection waiting for its next
// exchange has its read deadline at most tcpIdleHorizon ahead, re-armed
// as it passes, so that it still serves a request sent after several
// horizons and closes once idle TCPServerIdleTimeout, not before.
func TestServedConnIdleWaitRearmed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, cli := net.Pipe()
		defer cli.Close()
		cs := &tcpConnServer{c: srv, raw: srv}
		type got struct {
			b   byte
			err error
			at  time.Duration
		}
		read := func() <-chan got {
			ch := make(chan got, 1)
			idle := time.Now()
			cs.setReadDeadline(idle.Add(tcpIdleHorizon))
			go func() {
				b, err := cs.readFirst(idle)
				ch <- got{b, err, time.Since(idle)}
			}()
			return ch
		}
		ch := read()
		time.Sleep(3*tcpIdleHorizon + time.Second)
		synctest.Wait()
		select {
		case g := <-ch:
			t.Fatalf("the wait ended after %v (%v), before the idle timeout", g.at, g.err)
		default:
		}
		if d := cs.rdSet.Sub(time.Now()); d <= 0 || d > tcpIdleHorizon+time.Second {
			t.Fatalf("read deadline %v ahead, want at most the horizon %v (and its slack)", d, tcpIdleHorizon)
		}
		if _, err := cli.Write([]byte{7}); err != nil {
			t.Fatal(err)
		}
		if g := <-ch; g.err != nil || g.b != 7 {
			t.Fatalf("a request after %v idle: %v, %v", g.at, g.b, g.err)
		}

		ch = read()
		g := <-ch
		if !errors.Is(g.err, os.ErrDeadlineExceeded) {
			t.Fatalf("an idle connection's wait ended with %v, want its deadline", g.err)
		}
		if g.at < TCPServerIdleTimeout || g.at > TCPServerIdleTimeout+time.Second {
			t.Fatalf("an idle connection closed after %v, want %v (and the slack)", g.at, TCPServerIdleTimeout)
		}
	})
}

// countingConn counts the read deadlines set on a connection.
type countingConn struct {
	net.Conn
	sets atomic.Int64
}

func (c *countingConn) SetReadDeadline(t time.Time) error {
	c.sets.Add(1)
	return c.Conn.SetReadDeadline(t)
}

// TestServedConnDeadlineOncePerSecond: exchanges one after another on a
// served connection (the wait for the next one and its first read alike)
// change its read deadline about once per httpfast.DeadlineSlack, not
// at each exchange.
func TestServedConnDeadlineOncePerSecond(t *testing.T) {
	fwd := servingForwarder(t)
	watches := newWatchList(time.Hour) // no exchange is watched
	srv, cli := net.Pipe()
	raw := &countingConn{Conn: srv}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fwd.serveConnOn(context.Background(), mesh.PeerInfo{ID: servedPeer}, srv, raw, watches)
	}()
	req, err := appendJSONFrame(nil, frameReqHead, meshRequestHead{V: MeshWireVersion, Role: "chat", Method: "POST",
		Path: "/v1/chat/completions", ContentType: "application/json", BodyBytes: 13})
	if err != nil {
		t.Fatal(err)
	}
	req = appendBodyFrames(req, frameReqBody, []byte(`{"model":"x"}`))
	req = mesh.AppendFrameHeader(req, frameReqEnd, 0)
	_ = cli.SetDeadline(time.Now().Add(30 * time.Second))
	const exchanges = 40
	start := time.Now()
	for i := range exchanges {
		if _, err := cli.Write(req); err != nil {
			t.Fatalf("exchange %d: %v", i, err)
		}
		for {
			ft, _, err := mesh.ReadFrame(cli, 0)
			if err != nil {
				t.Fatalf("exchange %d: %v", i, err)
			}
			if ft == frameRespEnd {
				break
			}
		}
	}
	took := time.Since(start)
	_ = cli.Close()
	<-done
	// The first deadline, and one per second (and its slack) the
	// exchanges took; before, two an exchange.
	if n, most := raw.sets.Load(), 2+2*int64(took/time.Second); n > most {
		t.Errorf("%d exchanges in %v set the read deadline %d times, want at most %d", exchanges, took, n, most)
	}
}

// TestServeTimerAcrossExchanges: the serve timeout's timer is the
// connection's. An exchange begun while it is armed for an earlier one
// still times out at its own due time, not the earlier one's; one that
// ended does not; a connection idle when it fires arms it again with its
// next exchange, and an ended connection's never fires.
func TestServeTimerAcrossExchanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = time.Minute
		srv, cli := net.Pipe()
		defer cli.Close()
		defer srv.Close()
		cs := &tcpConnServer{f: &Forwarder{serveTimeout: timeout}, ctx: httpfast.NewContext(), c: srv, raw: srv}
		exchange := func() *tcpServerStream {
			s := &tcpServerStream{cs: cs}
			s.begin()
			return s
		}
		timedOut := func(s *tcpServerStream) bool {
			return errors.Is(s.ctx.Cause(), context.DeadlineExceeded)
		}

		first := exchange()
		first.cancel() // a quick exchange
		time.Sleep(timeout / 2)
		second := exchange()
		time.Sleep(timeout/2 + time.Second) // past the first's due time
		synctest.Wait()
		if first.ctx.Cause() != context.Canceled || timedOut(second) {
			t.Fatalf("at the first exchange's due time: first %v, second %v", first.ctx.Cause(), second.ctx.Cause())
		}
		time.Sleep(timeout / 2) // past the second's
		synctest.Wait()
		if !timedOut(second) {
			t.Fatalf("the second exchange ran past its serve timeout: %v", second.ctx.Cause())
		}
		second.cancel()

		time.Sleep(2 * timeout) // the timer fired with nothing running: unarmed
		synctest.Wait()
		third := exchange()
		time.Sleep(timeout - time.Second)
		synctest.Wait()
		if third.ctx.Err() != nil {
			t.Fatalf("the third exchange ended early: %v", third.ctx.Cause())
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if !timedOut(third) {
			t.Fatalf("after an idle spell, an exchange ran past its serve timeout: %v", third.ctx.Cause())
		}
		third.cancel()

		cs.ctx.Cancel(errors.New("connection gone"))
		cs.timer.Stop()
		fourth := exchange()
		if fourth.ctx.Err() == nil || timedOut(fourth) {
			t.Fatalf("an exchange begun on an ended connection: %v, want cancelled with the connection", fourth.ctx.Cause())
		}
		time.Sleep(2 * timeout)
		synctest.Wait()
		if timedOut(fourth) {
			t.Fatal("an ended connection's serve timer fired")
		}
	})
}
