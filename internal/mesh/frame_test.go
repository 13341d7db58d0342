package mesh

import (
	"bytes"
	"encoding/binary"
	"errors"
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
		}
	})
}
