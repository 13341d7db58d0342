package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Test ports. A port asked of the kernel (127.0.0.1:0) and closed again
// is "free a moment ago": before the node binds it, any socket that asks
// for an ephemeral port (a parallel test's listener, an outgoing UDP or
// TCP socket, a relay's dial) may be handed the same number, and the node
// fails with EADDRINUSE; a node restarted at its address has the same
// window. reservePort closes it: ports come from below the kernel's
// ephemeral range, which the kernel never hands out for port 0, and each
// is held by an flock on a file named after it for as long as the test
// runs, so no other test of this process or of another test process
// (another package, a second `go test` on the same machine) takes it.

// portLockDir holds one lock file per reserved port, shared by every test
// process of the machine.
func portLockDir() string { return filepath.Join(os.TempDir(), "nodeld-test-ports") }

// testPortRange is where reservePort looks: the 15,000 ports below the
// kernel's ephemeral range (Linux's ip_local_port_range), never below
// 16384, clear of the shipped configs' ports (7401-9467) and the model
// servers' well-known ports (8000, 8080, 11434).
var testPortRange = sync.OnceValues(func() (lo, hi int) {
	ephLo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				ephLo = n
			}
		}
	}
	hi = ephLo
	lo = max(hi-15000, 16384)
	if hi-lo < 1000 { // an unusual ephemeral range: above it instead
		lo, hi = 61000, 65535
	}
	return lo, hi
})

var (
	portMu   sync.Mutex
	portNext int
)

// reservePort returns a loopback port free for TCP and UDP that no other
// test takes until t ends.
func reservePort(t testing.TB) int {
	t.Helper()
	lo, hi := testPortRange()
	dir := makePortLockDir(t)
	portMu.Lock()
	defer portMu.Unlock()
	if portNext == 0 {
		portNext = lo + rand.IntN(hi-lo)
	}
	for range hi - lo {
		p := portNext
		if portNext++; portNext >= hi {
			portNext = lo
		}
		f, err := lockPort(dir, p, false)
		if err != nil {
			continue
		}
		if !bindable(p) {
			_ = f.Close()
			continue
		}
		t.Cleanup(func() { _ = f.Close() })
		return p
	}
	t.Fatalf("no free test port in %d-%d", lo, hi)
	return 0
}

// holdPorts takes the locks of fixed ports (a shipped config's), waiting
// for another test process that holds them, until t ends. Tests that bind
// fixed ports run one at a time across the machine so.
func holdPorts(t testing.TB, ports ...int) {
	t.Helper()
	dir := makePortLockDir(t)
	for _, p := range ports {
		f, err := lockPort(dir, p, true)
		if err != nil {
			t.Fatalf("lock port %d: %v", p, err)
		}
		t.Cleanup(func() { _ = f.Close() })
	}
}

// makePortLockDir makes the lock directory, shared by every user as /tmp
// is (sticky, world-writable; best effort: another user may own it).
func makePortLockDir(t testing.TB) string {
	t.Helper()
	dir := portLockDir()
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(dir, 0o777|os.ModeSticky)
	return dir
}

// lockPort opens port p's lock file and locks it; wait blocks until the
// lock is free, else a held lock is an error. The lock goes with the
// file's close (or the process's end).
func lockPort(dir string, p int, wait bool) (*os.File, error) {
	// Read-only: flock needs no write access, so another user's lock
	// file locks as well.
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(p)), os.O_RDONLY|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	how := syscall.LOCK_EX
	if !wait {
		how |= syscall.LOCK_NB
	}
	for {
		err = syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// bindable reports whether 127.0.0.1:p binds for TCP and for UDP now.
func bindable(p int) bool {
	addr := fmt.Sprintf("127.0.0.1:%d", p)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer ln.Close()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	_ = pc.Close()
	return true
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
	return fmt.Sprintf("127.0.0.1:%d", reservePort(t))
}

// freeAddr is a reserved loopback address for a TCP listener.
func freeAddr(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", reservePort(t))
}

// TestReservePortUnique: reserved ports are distinct, below the ephemeral
// range, and a reserved port is not handed out again while it is held,
// not even by another lock on its file (another process's).
func TestReservePortUnique(t *testing.T) {
	lo, hi := testPortRange()
	seen := map[int]bool{}
	for range 50 {
		p := reservePort(t)
		if p < lo || p >= hi || seen[p] {
			t.Fatalf("port %d (range %d-%d, seen %v)", p, lo, hi, seen[p])
		}
		seen[p] = true
	}
	for p := range seen {
		if f, err := lockPort(portLockDir(), p, false); err == nil {
			_ = f.Close()
			t.Fatalf("port %d's lock taken twice", p)
		}
	}
}
