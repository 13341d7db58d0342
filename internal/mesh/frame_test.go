package mesh

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	payloads := [][]byte{nil, []byte("x"), bytes.Repeat([]byte("a"), 5000), bytes.Repeat([]byte("b"), MaxFrameSize)}
	for i, p := range payloads {
		if err := WriteFrame(&buf, FrameType(i+1), p); err != nil {
			t.Fatal(err)
		}
	}
	for i, p := range payloads {
		typ, got, err := ReadFrame(&buf, MaxFrameSize)
		if err != nil || typ != FrameType(i+1) || !bytes.Equal(got, p) {
			t.Fatalf("frame %d: type %d, %d bytes, %v", i, typ, len(got), err)
		}
	}
	if _, _, err := ReadFrame(&buf, 0); !errors.Is(err, io.EOF) {
		t.Fatalf("read at a clean end = %v, want io.EOF", err)
	}
}

func TestFrameBounds(t *testing.T) {
	if err := WriteFrame(io.Discard, 1, make([]byte, MaxFrameSize+1)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("write over the bound = %v", err)
	}
	hdr := make([]byte, FrameHeaderSize)
	hdr[0] = 1
	binary.BigEndian.PutUint32(hdr[1:], 0xFFFFFFFF)
	if _, _, err := ReadFrame(bytes.NewReader(hdr), 64); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("read 4 GiB header = %v, want ErrFrameTooLarge", err)
	}
	binary.BigEndian.PutUint32(hdr[1:], 65)
	if _, _, err := ReadFrame(bytes.NewReader(hdr), 64); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("read over the caller's bound = %v", err)
	}
	binary.BigEndian.PutUint32(hdr[1:], 10)
	if _, _, err := ReadFrame(bytes.NewReader(append(hdr, 1, 2, 3)), 64); !errors.Is(err, ErrTruncatedFrame) {
		t.Fatalf("truncated payload = %v", err)
	}
	if _, _, err := ReadFrame(bytes.NewReader(hdr[:3]), 64); !errors.Is(err, ErrTruncatedFrame) {
		t.Fatalf("truncated header = %v", err)
	}
}

func TestReadFrameIntoAndHeader(t *testing.T) {
	var buf bytes.Buffer
	b := AppendFrameHeader(nil, 7, 3)
	buf.Write(append(b, "abc"...))
	buf.Write(AppendFrameHeader(nil, 8, 0))
	into := make([]byte, 4)
	typ, p, err := ReadFrameInto(&buf, into)
	if err != nil || typ != 7 || string(p) != "abc" || &p[0] != &into[0] {
		t.Fatalf("ReadFrameInto = %d %q %v, want 7 abc in the caller's buffer", typ, p, err)
	}
	if typ, n, err := ReadFrameHeader(&buf, 0); err != nil || typ != 8 || n != 0 {
		t.Fatalf("ReadFrameHeader = %d %d %v, want 8 0", typ, n, err)
	}
	if _, _, err := ReadFrameInto(&buf, into); !errors.Is(err, io.EOF) {
		t.Fatalf("at a clean end = %v, want io.EOF", err)
	}
	over := bytes.NewReader(append(AppendFrameHeader(nil, 1, 5), "abcde"...))
	if _, _, err := ReadFrameInto(over, into); !errors.Is(err, ErrFrameTooLarge) || over.Len() != 5 {
		t.Fatalf("frame over the buffer = %v with %d payload bytes unread, want ErrFrameTooLarge before reading them", err, over.Len())
	}
	if _, _, err := ReadFrameInto(bytes.NewReader(append(AppendFrameHeader(nil, 1, 5), "ab"...)), make([]byte, 8)); !errors.Is(err, ErrTruncatedFrame) {
		t.Fatalf("truncated payload = %v", err)
	}
	if _, _, err := ReadFrameInto(bytes.NewReader(AppendFrameHeader(nil, 1, 1)), nil); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("payload into no buffer = %v", err)
	}
}

// ReadFrameBuffered reads a payload that fits its buffer into it, a
// larger one (up to its bound) into a slice of its own, with ReadFrame's
// bound and errors; a frame that fits costs no allocation.
func TestReadFrameBuffered(t *testing.T) {
	var hdr [FrameHeaderSize]byte
	buf := make([]byte, 4)
	small := append(AppendFrameHeader(nil, 7, 3), "abc"...)
	typ, p, err := ReadFrameBuffered(bytes.NewReader(small), 16, hdr[:], buf)
	if err != nil || typ != 7 || string(p) != "abc" || &p[0] != &buf[0] {
		t.Fatalf("a small frame = %d %q %v, want 7 abc in the caller's buffer", typ, p, err)
	}
	large := append(AppendFrameHeader(nil, 7, 6), "abcdef"...)
	typ, p, err = ReadFrameBuffered(bytes.NewReader(large), 16, hdr[:], buf)
	if err != nil || typ != 7 || string(p) != "abcdef" || string(buf) == "abcd" {
		t.Fatalf("a frame over the buffer = %d %q %v (buffer %q), want 7 abcdef in a slice of its own", typ, p, err, buf)
	}
	for _, tc := range []struct {
		in   []byte
		want error
	}{
		{nil, io.EOF},
		{small[:3], ErrTruncatedFrame},
		{small[:len(small)-1], ErrTruncatedFrame},
		{large, ErrFrameTooLarge}, // over the bound of 5 below
	} {
		_, _, got := ReadFrameBuffered(bytes.NewReader(tc.in), 5, hdr[:], buf)
		_, _, want := ReadFrame(bytes.NewReader(tc.in), 5)
		if !errors.Is(got, tc.want) || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%d bytes: %v, want %v (ReadFrame: %v)", len(tc.in), got, tc.want, want)
		}
	}
	r := bytes.NewReader(small)
	if n := testing.AllocsPerRun(100, func() {
		r.Reset(small)
		if _, _, err := ReadFrameBuffered(r, 16, hdr[:], buf); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("a frame that fits allocates %v times", n)
	}
}

func FuzzReadFrame(f *testing.F) {
	var buf bytes.Buffer
	_ = WriteFrame(&buf, 2, []byte(`{"role":"chat"}`))
	f.Add(buf.Bytes(), 64)
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff}, 1024)
	f.Add([]byte{}, 0)
	f.Fuzz(func(t *testing.T, data []byte, max int) {
		r := bytes.NewReader(data)
		for {
			typ, p, err := ReadFrame(r, max)
			if err != nil {
				return
			}
			bound := max
			if bound <= 0 || bound > MaxFrameSize {
				bound = MaxFrameSize
			}
			if len(p) > bound {
				t.Fatalf("payload of %d bytes over bound %d", len(p), bound)
			}
			var out bytes.Buffer
			if err := WriteFrame(&out, typ, p); err != nil {
				t.Fatal(err)
			}
			// ReadFrameInto with a buffer of just the payload reads the same.
			typ2, p2, err := ReadFrameInto(bytes.NewReader(out.Bytes()), make([]byte, len(p)))
			if err != nil || typ2 != typ || !bytes.Equal(p2, p) {
				t.Fatalf("ReadFrameInto = %d, %d bytes, %v; ReadFrame read %d, %d bytes", typ2, len(p2), err, typ, len(p))
			}
		}
	})
}
