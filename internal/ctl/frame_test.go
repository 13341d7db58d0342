package ctl

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

func frame(t FrameType, payload []byte) []byte {
	b := []byte{byte(t), 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
	return append(b, payload...)
}

func TestMessageRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, MaxFrameBytes - 1, MaxFrameBytes, MaxFrameBytes + 1, 2*MaxFrameBytes + 7} {
		msg := bytes.Repeat([]byte{'x'}, n)
		var buf bytes.Buffer
		if err := WriteMessage(&buf, msg); err != nil {
			t.Fatal(err)
		}
		got, err := ReadMessage(&buf, n)
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("%d bytes: message differs", n)
		}
		if buf.Len() != 0 {
			t.Fatalf("%d bytes: %d bytes left unread", n, buf.Len())
		}
	}
}

func TestReadMessageFillsLimit(t *testing.T) {
	cat := bytes.Join([][]byte{frame(FrameMore, []byte("abcdefghij")), frame(FrameLast, nil)}, nil)
	got, err := ReadMessage(bytes.NewReader(cat), 10)
	if err != nil || string(got) != "abcdefghij" {
		t.Fatalf("got %q %v", got, err)
	}
}

func TestReadMessageErrors(t *testing.T) {
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	tests := []struct {
		name  string
		give  []byte
		limit int
		want  error
	}{
		{"empty stream", nil, 10, io.EOF},
		{"header cut", []byte{2, 0}, 10, ErrTruncatedMessage},
		{"payload cut", frame(FrameLast, []byte("abc"))[:6], 10, ErrTruncatedMessage},
		{"ends after more", frame(FrameMore, []byte("abc")), 10, ErrTruncatedMessage},
		{"over limit in one frame", frame(FrameLast, []byte("abcdefghijk")), 10, ErrMessageTooLarge},
		{"over limit across frames", cat(frame(FrameMore, []byte("abcdef")), frame(FrameLast, []byte("ghijk"))), 10, ErrMessageTooLarge},
		{"over limit with no room left", cat(frame(FrameMore, []byte("abcdefghij")), frame(FrameLast, []byte("k"))), 10, ErrMessageTooLarge},
		{"frame above the frame bound", []byte{2, 0, 0x10, 0, 1}, MaxResponseBytes, ErrMessageTooLarge},
		{"unknown frame type", frame(7, []byte("a")), 10, ErrMalformedMessage},
		{"empty continuation", cat(frame(FrameMore, nil), frame(FrameLast, []byte("a"))), 10, ErrMalformedMessage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadMessage(bytes.NewReader(tt.give), tt.limit)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
}
