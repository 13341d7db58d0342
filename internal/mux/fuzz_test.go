package mux

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// FuzzFrames checks the header decoder: any 8 bytes decode without panic,
// and a header check accepts encodes back to the same bytes.
func FuzzFrames(f *testing.F) {
	f.Add(frame(1, typeData, flagFIN, nil))
	f.Add(frame(3, typeWindow, 0, u32(1)))
	f.Add(frame(5, typeReset, 0, u32(codeCancel)))
	f.Add(frame(0, 9, 3, nil))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < headerLen {
			return
		}
		h := parseHeader(b)
		for _, maxFrame := range []int{minMaxFrame, defaultMaxFrame, maxMaxFrame} {
			if err := h.check(maxFrame); err != nil {
				if !errors.Is(err, ErrProtocol) {
					t.Fatalf("check error %v does not wrap ErrProtocol", err)
				}
				continue
			}
			if h.id == 0 || h.typ > typeReset || (h.typ == typeData && int(h.length) > maxFrame) || (h.typ != typeData && h.length != controlLen) {
				t.Fatalf("check accepted %+v with MaxFrame %d", h, maxFrame)
			}
			if got := appendHeader(nil, h); !bytes.Equal(got, b[:headerLen]) {
				t.Fatalf("header %x decodes to %+v, which encodes to %x", b[:headerLen], h, got)
			}
		}
	})
}

// fuzzConn is the peer's side of a session: Read serves the fuzzer's
// bytes (in chunks, so frames split across reads), then io.EOF; Write
// discards. Each Read checks the session's memory bounds.
type fuzzConn struct {
	t     *testing.T
	mu    sync.Mutex
	in    []byte
	chunk int
	s     *Session
}

func (c *fuzzConn) Read(p []byte) (int, error) {
	c.checkBounds()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.in) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.chunk)], c.in)
	c.in = c.in[n:]
	return n, nil
}

// checkBounds fails the test if the session holds more than its bounds
// allow: Window per open stream received, 2 x WriteQueue queued.
func (c *fuzzConn) checkBounds() {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open > s.cfg.MaxStreams {
		c.t.Errorf("%d streams open, MaxStreams %d", s.open, s.cfg.MaxStreams)
	}
	for id, st := range s.streams {
		if cap(st.rbuf) > s.cfg.Window {
			c.t.Errorf("stream %d buffers %d bytes, window %d", id, cap(st.rbuf), s.cfg.Window)
		}
	}
	if q := s.queuedLocked(); q > 2*s.cfg.WriteQueue {
		c.t.Errorf("%d bytes queued, bound %d", q, 2*s.cfg.WriteQueue)
	}
}

func (c *fuzzConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *fuzzConn) Close() error                     { return nil }
func (c *fuzzConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *fuzzConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *fuzzConn) SetDeadline(time.Time) error      { return nil }
func (c *fuzzConn) SetReadDeadline(time.Time) error  { return nil }
func (c *fuzzConn) SetWriteDeadline(time.Time) error { return nil }

// FuzzServerSession feeds arbitrary bytes to a server session as its
// peer's: no panic, no hang (the session must end once the bytes run out),
// memory within the bounds. The application accepts every stream, reads
// it and writes back what it read.
func FuzzServerSession(f *testing.F) {
	f.Add(concat(frame(1, typeData, 0, []byte("hello")), frame(1, typeWindow, 0, u32(100)), frame(3, typeData, flagFIN, nil)), uint8(3))
	f.Add(concat(frame(1, typeData, flagFIN, []byte("a")), frame(1, typeReset, 0, u32(1)), frame(1, typeData, 0, []byte("late"))), uint8(64))
	f.Add(concat(frame(1, typeData, 0, make([]byte, 1024)), frame(1, typeData, 0, make([]byte, 1024))), uint8(200))
	f.Add(concat(frame(1, typeData, 0, nil), frame(3, typeData, 0, nil), frame(5, typeData, 0, nil), frame(7, typeData, 0, nil), frame(9, typeData, 0, nil)), uint8(8))
	f.Add(frame(2, typeData, 0, nil), uint8(1))
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8) {
		conn := &fuzzConn{t: t, in: in, chunk: 1 + int(chunk)}
		s, err := Server(conn, Config{MaxStreams: 4, Window: 16 << 10, MaxFrame: 1 << 10, WriteQueue: 4 << 10})
		if err != nil {
			t.Fatal(err)
		}
		conn.s = s
		var wg sync.WaitGroup
		for {
			st, err := s.Accept()
			if err != nil {
				break
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer st.Close()
				buf := make([]byte, 512)
				for {
					n, err := st.Read(buf)
					if err != nil {
						return
					}
					if _, err := st.Write(buf[:n]); err != nil {
						return
					}
				}
			}()
		}
		// The bytes ran out (or were refused): every stream's calls return.
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(testDeadline):
			s.Close()
			<-done
			t.Fatal("streams still blocked after the session ended")
		}
		if s.Err() == nil {
			t.Fatal("session open after its connection's EOF")
		}
		conn.checkBounds()
	})
}
