package mux

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// frame encodes one frame with a payload.
func frame(id uint32, typ, flags uint8, payload []byte) []byte {
	b := appendHeader(nil, header{id: id, typ: typ, flags: flags, length: uint16(len(payload))})
	return append(b, payload...)
}

// frameLen encodes a header whose length field says n, with n bytes.
func frameLen(id uint32, typ uint8, n int) []byte {
	return frame(id, typ, 0, make([]byte, n))
}

func u32(v uint32) []byte { return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)} }

func concat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// TestProtocolViolations sends each violation from a raw peer and checks
// the session fails with ErrProtocol and a message naming the problem.
func TestProtocolViolations(t *testing.T) {
	const window = 16 << 10
	tests := []struct {
		name   string
		client bool // the session under test is a client (it opens stream 1 first)
		give   []byte
		want   string
	}{
		{name: "unknown type", give: frame(1, 7, 0, nil), want: "unknown frame type 7"},
		{name: "DATA flags", give: frame(1, typeData, 2, nil), want: "unknown flags 0x2"},
		{name: "WINDOW flags", give: concat(frame(1, typeData, 0, nil), frame(1, typeWindow, 1, u32(1))), want: "unknown flags 0x1"},
		{name: "DATA too long", give: frameLen(1, typeData, 2000), want: "over the 1024-byte frame limit"},
		{name: "WINDOW length", give: concat(frame(1, typeData, 0, nil), frameLen(1, typeWindow, 3)), want: "WINDOW on stream 1 of 3 bytes, want 4"},
		{name: "RESET length", give: concat(frame(1, typeData, 0, nil), frameLen(1, typeReset, 5)), want: "RESET on stream 1 of 5 bytes, want 4"},
		{name: "WINDOW of 0", give: concat(frame(1, typeData, 0, nil), frame(1, typeWindow, 0, u32(0))), want: "WINDOW of 0"},
		{name: "WINDOW overflow", give: concat(frame(1, typeData, 0, nil), frame(1, typeWindow, 0, u32(1<<31-1))), want: "grows it past"},
		{name: "stream 0", give: frame(0, typeData, 0, nil), want: "stream 0 (reserved"},
		{name: "even id", give: frame(2, typeData, 0, nil), want: "even stream id 2"},
		{name: "first id not 1", give: frame(3, typeData, 0, nil), want: "new stream 3 out of order (want 1"},
		{name: "id going backwards", give: concat(frame(1, typeData, 0, nil), frame(5, typeData, 0, nil), frame(3, typeData, 0, nil)), want: "new stream 5 out of order (want 3"},
		{name: "WINDOW opens no stream", give: frame(1, typeWindow, 0, u32(1)), want: "WINDOW on stream 1, which was never opened"},
		{name: "data after FIN", give: concat(frame(1, typeData, flagFIN, nil), frame(1, typeData, 0, []byte("x"))), want: "after its FIN"},
		{name: "data past the window", give: func() []byte {
			var b []byte
			for range window / 1024 {
				b = append(b, frameLen(1, typeData, 1024)...)
			}
			return append(b, frameLen(1, typeData, 1)...)
		}(), want: "past its window: 1 bytes, 0 allowed"},
		{name: "client: never-opened id", client: true, give: frame(3, typeData, 0, nil), want: "stream 3, which this client never opened"},
		{name: "client: even id", client: true, give: frame(4, typeWindow, 0, u32(1)), want: "even stream id 4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, s := tcpPair(t)
			cfg := Config{Window: window, MaxFrame: 1024, WriteQueue: 4096}
			var sess *Session
			var err error
			if tt.client {
				sess, err = Client(c, cfg)
			} else {
				sess, err = Server(s, cfg)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			peer := s
			if !tt.client {
				peer = c
			}
			if _, err := peer.Write(tt.give); err != nil {
				t.Fatal(err)
			}
			if tt.client {
				st, _ := sess.Open()
				st.Write([]byte("x"))
				st.SetReadDeadline(time.Now().Add(testDeadline))
				st.Read(make([]byte, 1))
			} else {
				for {
					if _, err := sess.Accept(); err != nil {
						break
					}
				}
			}
			<-sess.Done()
			err = sess.Err()
			if !errors.Is(err, ErrProtocol) || !errors.Is(err, ErrSessionClosed) {
				t.Fatalf("session error %v, want ErrProtocol", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("session error %q, want it to say %q", err, tt.want)
			}
		})
	}
}

// TestEndedStreamFramesDiscarded checks that frames for a stream that
// ended here (DATA, WINDOW and RESET alike) are dropped, not errors.
func TestEndedStreamFramesDiscarded(t *testing.T) {
	c, s := tcpPair(t)
	server, err := Server(s, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	c.Write(frame(1, typeData, 0, []byte("a")))
	st, err := server.Accept()
	if err != nil {
		t.Fatal(err)
	}
	st.End()
	c.Write(concat(frame(1, typeData, 0, []byte("late")), frame(1, typeWindow, 0, u32(5)), frame(1, typeReset, 0, u32(codeCancel)), frame(3, typeData, 0, []byte("b"))))
	st3, err := server.Accept()
	if err != nil {
		t.Fatalf("Accept after late frames: %v", err)
	}
	if st3.ID() != 3 {
		t.Errorf("accepted stream %d, want 3", st3.ID())
	}
	var _ net.Conn = st3
}
