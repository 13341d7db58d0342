package meshproxy

import (
	"context"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nodeld/nodeld/internal/httpfast"
)

// watchedExchange is a served exchange on one end of a pipe whose request
// was read, for the watch list's tests.
func watchedExchange(t *testing.T, w *watchList, wg *sync.WaitGroup) (s *tcpServerStream, consumer net.Conn) {
	t.Helper()
	srv, cli := net.Pipe()
	cs := &tcpConnServer{f: &Forwarder{serveTimeout: time.Hour}, ctx: httpfast.NewContext(), c: srv, raw: srv, wg: wg, watches: w}
	s = &tcpServerStream{cs: cs}
	s.begin()
	t.Cleanup(s.cancel)
	t.Cleanup(cs.timer.Stop)
	return s, cli
}

func (s *tcpServerStream) isWatching() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watching
}

// TestWatchListStartsDueWatchers: an exchange still running TCPWatchDelay
// after its request was read gets its watcher within half that again (and
// its consumer going away cancels it); one that ended first gets none; the
// list sleeps once nothing is listed, and wakes for the next exchange.
func TestWatchListStartsDueWatchers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		w := newWatchList(TCPWatchDelay)
		done := make(chan struct{})
		go func() {
			defer close(done)
			w.run(ctx)
		}()
		var wg sync.WaitGroup

		long, consumer := watchedExchange(t, w, &wg)
		long.requestRead()
		time.Sleep(TCPWatchDelay - time.Millisecond)
		synctest.Wait()
		if long.isWatching() {
			t.Fatal("watched before TCPWatchDelay")
		}
		time.Sleep(TCPWatchDelay/2 + time.Millisecond)
		synctest.Wait()
		if !long.isWatching() {
			t.Fatal("not watched TCPWatchDelay*1.5 after its request was read")
		}
		_ = consumer.Close() // the consumer went away
		synctest.Wait()
		if long.ctx.Err() == nil {
			t.Fatal("the consumer's going away did not cancel the exchange")
		}
		long.end()
		wg.Wait()

		short, consumer2 := watchedExchange(t, w, &wg)
		defer consumer2.Close()
		short.requestRead()
		short.mu.Lock()
		short.wroteEnd = true
		short.mu.Unlock()
		if !short.end() {
			t.Fatal("a clean short exchange did not leave the connection to its goroutine")
		}
		time.Sleep(2 * TCPWatchDelay)
		synctest.Wait()
		if short.isWatching() {
			t.Fatal("an exchange that ended got a watcher")
		}

		time.Sleep(tcpWatchIdleTicks * TCPWatchDelay)
		synctest.Wait()
		w.mu.Lock()
		asleep, listed := w.asleep, len(w.entries)
		w.mu.Unlock()
		if !asleep || listed != 0 {
			t.Fatalf("idle list: asleep %v with %d listed, want asleep with none", asleep, listed)
		}
		again, consumer3 := watchedExchange(t, w, &wg)
		again.requestRead()
		time.Sleep(TCPWatchDelay * 3 / 2)
		synctest.Wait()
		if !again.isWatching() {
			t.Fatal("an exchange after the list slept was not watched")
		}
		_ = consumer3.Close()
		again.end()
		wg.Wait()
		cancel()
		<-done
	})
}
