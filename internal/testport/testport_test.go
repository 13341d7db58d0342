package testport

import (
	"net"
	"testing"
)

// Reserved ports are distinct, in Range, bindable, and not handed out
// again while held, not even by another lock on their file (another
// process's).
func TestReserveUnique(t *testing.T) {
	lo, hi := Range()
	if lo < 1024 || hi > 65536 || hi-lo < 1000 {
		t.Fatalf("range %d-%d", lo, hi)
	}
	seen := map[int]bool{}
	for range 50 {
		p := Reserve(t)
		if p < lo || p >= hi || seen[p] {
			t.Fatalf("port %d (range %d-%d, seen %v)", p, lo, hi, seen[p])
		}
		seen[p] = true
	}
	for p := range seen {
		if f, err := Lock(LockDir(), p, false); err == nil {
			_ = f.Close()
			t.Fatalf("port %d's lock taken twice", p)
		}
	}
}

// A port the kernel hands out for port 0 is never one Reserve gives: the
// kernel's ephemeral range is above Range.
func TestReserveIsNotEphemeral(t *testing.T) {
	_, hi := Range()
	for range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		if p < hi && hi != 65535 {
			t.Fatalf("kernel's ephemeral port %d is below Range's end %d", p, hi)
		}
	}
}

// A held port is not bindable by a second holder until the first ends.
func TestLockReleasedWithTest(t *testing.T) {
	var p int
	t.Run("hold", func(t *testing.T) { p = Reserve(t) })
	f, err := Lock(LockDir(), p, false)
	if err != nil {
		t.Fatalf("port %d still locked after its test ended: %v", p, err)
	}
	_ = f.Close()
}
