package httpfasttest

import (
	"bufio"
	"bytes"
	"net"
	"testing"
)

// Start serves answer on a loopback listener until the test ends and
// returns its address.
func Start(tb testing.TB, answer []byte) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = ln.Close() })
	go Serve(ln, answer)
	return ln.Addr().String()
}

// Serve answers every request read on ln's connections with answer, until
// ln is closed.
func Serve(ln net.Listener, answer []byte) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			br := bufio.NewReaderSize(c, 8<<10)
			for {
				length, err := ReadHead(br)
				if err != nil {
					return
				}
				if _, err := br.Discard(length); err != nil {
					return
				}
				if _, err := c.Write(answer); err != nil {
					return
				}
			}
		}()
	}
}

var contentLengthPrefix = []byte("content-length:")

// ReadHead reads a head (request or response) from br and returns its
// Content-Length (0 without one).
func ReadHead(br *bufio.Reader) (int, error) {
	length := 0
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		if len(line) <= 2 {
			return length, nil
		}
		if len(line) > len(contentLengthPrefix) && bytes.EqualFold(line[:len(contentLengthPrefix)], contentLengthPrefix) {
			length = 0
			for _, c := range bytes.TrimSpace(line[len(contentLengthPrefix):]) {
				length = length*10 + int(c-'0')
			}
		}
	}
}
