package main

import (
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSystemdNotify runs nodeld as systemd would with Type=notify and a
// watchdog: it must send READY=1 once ready, WATCHDOG=1 pings, and
// STOPPING=1 on SIGTERM, on the socket in NOTIFY_SOCKET.
func TestSystemdNotify(t *testing.T) {
	t.Parallel()
	sockPath := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sockPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msgs := make(chan string, 64)
	go func() {
		defer close(msgs)
		buf := make([]byte, 4096)
		for {
			n, _, err := conn.ReadFromUnix(buf)
			if err != nil {
				return
			}
			for _, line := range strings.Split(strings.TrimSpace(string(buf[:n])), "\n") {
				msgs <- line
			}
		}
	}()
	expect := func(want string) {
		t.Helper()
		deadline := time.After(waitTimeout)
		for {
			select {
			case m, ok := <-msgs:
				if !ok {
					t.Fatalf("notify socket closed before %q", want)
				}
				if m == want {
					return
				}
			case <-deadline:
				t.Fatalf("no %q on the notify socket", want)
			}
		}
	}
	dataDir := filepath.Join(t.TempDir(), "data")
	// A 400 ms watchdog: nodeld pings at half of it.
	d := startDaemonEnv(t, dataDir, nodeConfig(dataDir, ""), []string{"NOTIFY_SOCKET=" + sockPath, "WATCHDOG_USEC=400000"})
	expect("READY=1")
	d.waitReady()
	expect("WATCHDOG=1")
	expect("WATCHDOG=1")
	d.signal(syscall.SIGTERM)
	expect("STOPPING=1")
	if code := d.wait(); code != 0 {
		t.Fatalf("exit = %d", code)
	}
}
