//go:build !linux

package httpfast

import "net"

// RawIO returns c: the P-keeping system calls are Linux's alone.
func RawIO(c net.Conn) net.Conn { return c }

func writeBuffers(c net.Conn, v *net.Buffers) (int64, error) { return v.WriteTo(c) }

// SendAwait runs send: the poller window it saves a read in is Linux's.
func SendAwait(_ net.Conn, send Sender) error { return send.Send() }

// WriteCorked is write() where connections are not RawIO's.
func WriteCorked(_ net.Conn, write func() error) error { return write() }
