package mesh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// seen is what a's handler observed of one stream.
type seen struct {
	data string
	err  error
}

// TestStreamEnds checks each way of ending a Stream as the peer sees it.
// b opens the streams; a's handler reads a mode byte, says it started
// (an abort before that would end the stream before any handler), then
// either reads to the end ('r'; 'h' then holds the stream open until
// release) or writes until it fails ('w'), and reports.
func TestStreamEnds(t *testing.T) {
	a, b := pair(t)
	started := make(chan struct{}, 1)
	got := make(chan seen, 1)
	release := make(chan struct{})
	a.m.Handle(KindCtl, func(ctx context.Context, peer PeerInfo, s *Stream) {
		defer s.Close()
		var mode [1]byte
		if _, err := io.ReadFull(s, mode[:]); err != nil {
			got <- seen{err: err}
			return
		}
		started <- struct{}{}
		if mode[0] == 'w' {
			chunk := make([]byte, 1<<10)
			var err error
			for err == nil {
				_, err = s.Write(chunk)
			}
			got <- seen{err: err}
			return
		}
		data, err := io.ReadAll(s)
		got <- seen{string(data), err}
		if mode[0] == 'h' {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
	})
	open := func(t *testing.T, mode string) *Stream {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		s, err := b.m.OpenStream(ctx, a.id(), KindCtl)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Write([]byte(mode)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("handler not started")
		}
		return s
	}
	wait := func(t *testing.T) seen {
		t.Helper()
		select {
		case sn := <-got:
			return sn
		case <-time.After(waitTimeout):
			t.Fatal("handler saw nothing")
			return seen{}
		}
	}
	wantReset := func(t *testing.T, err error, want StreamCode) {
		t.Helper()
		if code, ok := ResetCode(err); !ok || code != want {
			t.Errorf("peer's error = %v (ResetCode %#x, %v), want its reset %#x", err, code, ok, want)
		}
	}

	t.Run("CloseWrite ends the write side only", func(t *testing.T) {
		s := open(t, "rhello")
		if err := s.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		if sn := wait(t); sn.data != "hello" || sn.err != nil {
			t.Errorf("peer read %q, %v; want hello, nil", sn.data, sn.err)
		}
		// The read side is still open: the handler's Close ends it cleanly.
		_ = s.SetReadDeadline(time.Now().Add(waitTimeout))
		if rest, err := io.ReadAll(s); err != nil || len(rest) != 0 {
			t.Errorf("read after CloseWrite = %q, %v; want the peer's clean end", rest, err)
		}
	})
	t.Run("Close unblocks a pending Read and delivers what was written", func(t *testing.T) {
		// The handler holds its side open: only Close can end the Read.
		s := open(t, "hbye")
		defer close(release)
		readErr := make(chan error, 1)
		go func() {
			_, err := s.Read(make([]byte, 1))
			readErr <- err
		}()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-readErr:
			if err == nil || errors.Is(err, io.EOF) {
				t.Errorf("pending Read after Close = %v, want this side's abort", err)
			}
			if code, ok := ResetCode(err); ok {
				t.Errorf("ResetCode of this side's own Close = %#x, true", code)
			}
		case <-time.After(waitTimeout):
			t.Fatal("pending Read not unblocked by Close")
		}
		if sn := wait(t); sn.data != "bye" || sn.err != nil {
			t.Errorf("peer read %q, %v; want bye, nil", sn.data, sn.err)
		}
	})
	t.Run("Reset aborts with its code", func(t *testing.T) {
		s := open(t, "r")
		s.Reset(StreamCodeTooLarge)
		wantReset(t, wait(t).err, StreamCodeTooLarge)
	})
	t.Run("AbortWrite aborts the peer's reads with its code", func(t *testing.T) {
		s := open(t, "r")
		s.AbortWrite(StreamCodeMalformed)
		wantReset(t, wait(t).err, StreamCodeMalformed)
		s.StopReading(StreamCodeCancelled)
	})
	t.Run("StopReading aborts the peer's writes with its code", func(t *testing.T) {
		s := open(t, "w")
		s.StopReading(StreamCodeTimeout)
		wantReset(t, wait(t).err, StreamCodeTimeout)
		_ = s.CloseWrite()
	})
}

func TestResetCodeOfOtherErrors(t *testing.T) {
	for _, err := range []error{nil, io.EOF, context.DeadlineExceeded, errors.New("x"), fmt.Errorf("wrapped: %w", io.ErrUnexpectedEOF)} {
		if code, ok := ResetCode(err); ok {
			t.Errorf("ResetCode(%v) = %#x, true", err, code)
		}
	}
}

func TestLinkFailed(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{io.EOF, false},
		{context.DeadlineExceeded, false},
		{&quic.StreamError{StreamID: 4, ErrorCode: quic.StreamErrorCode(StreamCodeCancelled), Remote: true}, false},
		{ErrNoLink, true},
		{fmt.Errorf("open: %w", ErrNoLink), true},
		{fmt.Errorf("read: %w", &quic.ApplicationError{ErrorCode: CodeDead, ErrorMessage: "liveness timeout"}), true},
		{&quic.IdleTimeoutError{}, true},
		{&quic.StatelessResetError{}, true},
	}
	for _, tt := range tests {
		if got := LinkFailed(tt.err); got != tt.want {
			t.Errorf("LinkFailed(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// An opened stream's kind byte leaves with its first write, whatever its
// size, or with CloseWrite when nothing is written: the peer's handler
// sees the kind and then exactly what was written.
func TestOpenedStreamSendsKindWithFirstWrite(t *testing.T) {
	a, b := pair(t)
	got := make(chan seen, 1)
	a.m.Handle(KindCtl, func(ctx context.Context, peer PeerInfo, s *Stream) {
		defer s.Close()
		data, err := io.ReadAll(s)
		got <- seen{string(data), err}
	})
	big := string(make([]byte, coalesceKindBytes+1))
	for _, tc := range []struct{ name, first, rest string }{
		{"small", "hello", " world"},
		{"larger than coalesced", big, "!"},
		{"nothing written", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			s, err := b.m.OpenStream(ctx, a.id(), KindCtl)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{tc.first, tc.rest} {
				if n, err := s.Write([]byte(p)); err != nil || n != len(p) {
					t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(p))
				}
			}
			if err := s.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			select {
			case sn := <-got:
				if sn.err != nil || sn.data != tc.first+tc.rest {
					t.Errorf("peer read %d bytes, %v; want %d bytes", len(sn.data), sn.err, len(tc.first+tc.rest))
				}
			case <-ctx.Done():
				t.Fatal("handler saw nothing")
			}
			s.StopReading(StreamCodeCancelled)
		})
	}
}

// FinishReading takes the peer's clean end when it is there, and stops
// the peer's writes when it is not.
func TestFinishReading(t *testing.T) {
	a, b := pair(t)
	writeErr := make(chan error, 1)
	a.m.Handle(KindCtl, func(ctx context.Context, peer PeerInfo, s *Stream) {
		var mode [1]byte
		if _, err := io.ReadFull(s, mode[:]); err != nil {
			writeErr <- err
			return
		}
		if mode[0] == 'e' {
			_, _ = s.Write([]byte("x"))
			_ = s.CloseWrite()
			return
		}
		chunk := make([]byte, 1<<10)
		var err error
		for err == nil {
			_, err = s.Write(chunk)
		}
		writeErr <- err
	})
	open := func(mode string) *Stream {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		s, err := b.m.OpenStream(ctx, a.id(), KindCtl)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Write([]byte(mode)); err != nil {
			t.Fatal(err)
		}
		_ = s.CloseWrite()
		return s
	}
	s := open("e")
	var x [1]byte
	_ = s.SetReadDeadline(time.Now().Add(waitTimeout))
	if _, err := io.ReadFull(s, x[:]); err != nil {
		t.Fatal(err)
	}
	if !s.FinishReading(waitTimeout) {
		t.Error("FinishReading after the peer's CloseWrite = false, want its clean end")
	}

	s = open("w")
	if s.FinishReading(time.Millisecond) {
		t.Error("FinishReading while the peer still writes = true")
	}
	select {
	case err := <-writeErr:
		if code, ok := ResetCode(err); !ok || code != StreamCodeCancelled {
			t.Errorf("peer's write error = %v, want stopped with StreamCodeCancelled", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("peer's writes not stopped")
	}
}
