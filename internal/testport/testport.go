package testport

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

// LockDir holds one lock file per reserved port, shared by every test
// process of the machine.
func LockDir() string { return filepath.Join(os.TempDir(), "nodeld-test-ports") }

// Range is where Reserve looks: the 15,000 ports below the kernel's
// ephemeral range (Linux's ip_local_port_range), never below 16384, clear
// of the shipped configs' ports (7401-9467) and the model servers'
// well-known ports (8000, 8080, 11434).
var Range = sync.OnceValues(func() (lo, hi int) {
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
	mu   sync.Mutex
	next int
)

// Reserve returns a loopback port free for TCP and UDP that no other test
// takes until tb ends.
func Reserve(tb testing.TB) int {
	tb.Helper()
	lo, hi := Range()
	dir := makeLockDir(tb)
	mu.Lock()
	defer mu.Unlock()
	if next == 0 {
		next = lo + rand.IntN(hi-lo)
	}
	for range hi - lo {
		p := next
		if next++; next >= hi {
			next = lo
		}
		f, err := Lock(dir, p, false)
		if err != nil {
			continue
		}
		if !Bindable(p) {
			_ = f.Close()
			continue
		}
		tb.Cleanup(func() { _ = f.Close() })
		return p
	}
	tb.Fatalf("no free test port in %d-%d", lo, hi)
	return 0
}

// Addr is a reserved port as a 127.0.0.1 address.
func Addr(tb testing.TB) string {
	tb.Helper()
	return fmt.Sprintf("127.0.0.1:%d", Reserve(tb))
}

// Hold takes the locks of fixed ports (a shipped config's), waiting for
// another test process that holds them, until tb ends. Tests that bind
// fixed ports run one at a time across the machine so.
func Hold(tb testing.TB, ports ...int) {
	tb.Helper()
	dir := makeLockDir(tb)
	for _, p := range ports {
		f, err := Lock(dir, p, true)
		if err != nil {
			tb.Fatalf("lock port %d: %v", p, err)
		}
		tb.Cleanup(func() { _ = f.Close() })
	}
}

// makeLockDir makes the lock directory, shared by every user as /tmp is
// (sticky, world-writable; best effort: another user may own it).
func makeLockDir(tb testing.TB) string {
	tb.Helper()
	dir := LockDir()
	if err := os.MkdirAll(dir, 0o777); err != nil {
		tb.Fatal(err)
	}
	_ = os.Chmod(dir, 0o777|os.ModeSticky)
	return dir
}

// Lock opens port p's lock file in dir and locks it; wait blocks until
// the lock is free, else a held lock is an error. The lock goes with the
// file's close (or the process's end).
func Lock(dir string, p int, wait bool) (*os.File, error) {
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

// Bindable reports whether 127.0.0.1:p binds for TCP and for UDP now.
func Bindable(p int) bool {
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
