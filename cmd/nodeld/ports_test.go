package main

import (
	"net"
	"testing"

	"github.com/nodeld/nodeld/internal/testport"
)

// Test ports come from internal/testport: below the kernel's ephemeral
// range and held by a lock file until the test ends, so that a node's
// port is not handed to another socket between the test choosing it and
// the node binding it.

// holdPorts takes the locks of fixed ports (a shipped config's) until t
// ends; tests that bind fixed ports run one at a time across the machine.
func holdPorts(t testing.TB, ports ...int) {
	t.Helper()
	testport.Hold(t, ports...)
}

// udpBindable reports whether addr binds for UDP now.
func udpBindable(addr string) bool {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	_ = pc.Close()
	return true
}

// freeUDPAddr is a reserved loopback address for a node's mesh listener.
func freeUDPAddr(t testing.TB) string {
	t.Helper()
	return testport.Addr(t)
}

// freeAddr is a reserved loopback address for a TCP listener.
func freeAddr(t testing.TB) string {
	t.Helper()
	return testport.Addr(t)
}
