package runner

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// procHex renders ap the way /proc/net/tcp{,6} prints addresses.
func procHex(ap netip.AddrPort) string {
	var b strings.Builder
	raw := ap.Addr().AsSlice()
	for i := 0; i < len(raw); i += 4 {
		fmt.Fprintf(&b, "%08X", binary.NativeEndian.Uint32(raw[i:]))
	}
	fmt.Fprintf(&b, ":%04X", ap.Port())
	return b.String()
}

const procHeader = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"

func procLine(slot int, local string, st string, inode uint64, v6 bool) string {
	rem := "00000000:0000"
	if v6 {
		rem = strings.Repeat("0", 32) + ":0000"
	}
	return fmt.Sprintf("%4d: %s %s %s 00000000:00000000 00:00000000 00000000  1000        0 %d 1 0000000000000000 100 0 0 10 0\n",
		slot, local, rem, st, inode)
}

func TestDecodeProcNetTCP(t *testing.T) {
	lo := netip.MustParseAddrPort("127.0.0.1:8080")
	any4 := netip.MustParseAddrPort("0.0.0.0:9000")
	lo6 := netip.MustParseAddrPort("[::1]:8081")
	any6 := netip.MustParseAddrPort("[::]:9001")
	mapped := netip.MustParseAddrPort("[::ffff:127.0.0.1]:9002")
	tests := []struct {
		name    string
		give    string
		v6      bool
		want    []procSocket
		wantErr bool
	}{
		{name: "header only", give: procHeader},
		{name: "v4", give: procHeader + procLine(0, procHex(lo), "0A", 111, false) + procLine(1, procHex(any4), "01", 222, false),
			want: []procSocket{{lo, 0x0A, 111}, {any4, 0x01, 222}}},
		{name: "literal little-endian v4 line", give: procHeader +
			"   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0000000000000000 100 0 0 10 0\n",
			want: []procSocket{{lo, 0x0A, 4242}}},
		{name: "v6", v6: true, give: procHeader + procLine(0, procHex(lo6), "0A", 1, true) + procLine(1, procHex(any6), "0A", 2, true) + procLine(2, procHex(mapped), "0A", 3, true),
			want: []procSocket{{lo6, 0x0A, 1}, {any6, 0x0A, 2}, {mapped, 0x0A, 3}}},
		{name: "blank lines skipped", give: procHeader + "\n" + procLine(0, procHex(lo), "0A", 1, false) + "\n",
			want: []procSocket{{lo, 0x0A, 1}}},
		{name: "no header", give: procLine(0, procHex(lo), "0A", 1, false), wantErr: true},
		{name: "empty", give: "", wantErr: true},
		{name: "short line", give: procHeader + "0: 0100007F:1F90\n", wantErr: true},
		{name: "v6 address in v4 table", give: procHeader + procLine(0, procHex(lo6), "0A", 1, true), wantErr: true},
		{name: "bad hex", give: procHeader + procLine(0, "0100007G:1F90", "0A", 1, false), wantErr: true},
		{name: "bad port", give: procHeader + procLine(0, "0100007F:1F9", "0A", 1, false), wantErr: true},
		{name: "bad state", give: procHeader + procLine(0, procHex(lo), "A", 1, false), wantErr: true},
		{name: "bad inode", give: strings.Replace(procHeader+procLine(0, procHex(lo), "0A", 77, false), " 77 ", " x ", 1), wantErr: true},
		{name: "bad slot", give: strings.Replace(procHeader+procLine(0, procHex(lo), "0A", 1, false), "0:", "0", 1), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeProcNetTCP([]byte(tt.give), tt.v6)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, errProcNet) {
				t.Errorf("err %v does not wrap errProcNet", err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("sockets (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeProcNetTCPBounds(t *testing.T) {
	line := "0: " + procHex(netip.MustParseAddrPort("127.0.0.1:1")) + " 00000000:0000 0A 0 0 0 0 0 1\n"
	big := procHeader + strings.Repeat(line, maxProcNetLines+1)
	if len(big) > maxProcNetBytes {
		t.Fatalf("test table of %d bytes is over the byte bound", len(big))
	}
	if _, err := decodeProcNetTCP([]byte(big), false); err == nil {
		t.Error("a table over maxProcNetLines decoded")
	}
	if socks, err := decodeProcNetTCP([]byte(procHeader+strings.Repeat(line, 10)), false); err != nil || len(socks) != 10 {
		t.Errorf("10 minimal lines: %d, %v", len(socks), err)
	}
	if _, err := decodeProcNetTCP(make([]byte, maxProcNetBytes+1), false); err == nil {
		t.Error("a table over maxProcNetBytes decoded")
	}
}

func TestNonLoopbackListeners(t *testing.T) {
	ap := netip.MustParseAddrPort
	socks := []procSocket{
		{ap("127.0.0.1:1"), tcpListenState, 1},
		{ap("127.9.9.9:2"), tcpListenState, 2},
		{ap("[::1]:3"), tcpListenState, 3},
		{ap("[::ffff:127.0.0.1]:4"), tcpListenState, 4},
		{ap("0.0.0.0:5"), tcpListenState, 5},
		{ap("[::]:6"), tcpListenState, 6},
		{ap("192.168.1.2:7"), tcpListenState, 7},
		{ap("0.0.0.0:8"), 0x01, 8},           // established, not a listener
		{ap("0.0.0.0:9"), tcpListenState, 9}, // someone else's
	}
	inodes := map[uint64]bool{1: true, 2: true, 3: true, 4: true, 5: true, 6: true, 7: true, 8: true}
	got := nonLoopbackListeners(socks, inodes)
	want := []netip.AddrPort{ap("0.0.0.0:5"), ap("[::]:6"), ap("192.168.1.2:7")}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
		t.Errorf("listeners (-want +got):\n%s", diff)
	}
}

func TestStatPGID(t *testing.T) {
	tests := []struct {
		give string
		want int
		ok   bool
	}{
		{"123 (sh) S 1 123 123 0 -1", 123, true},
		{"124 (a) b) (c) S 1 77 77 0", 77, true},
		{"125 (x) S 1", 0, false},
		{"no parens", 0, false},
		{"126 (x) S 1 notnum", 0, false},
	}
	for _, tt := range tests {
		g, ok := statPGID([]byte(tt.give))
		if g != tt.want || ok != tt.ok {
			t.Errorf("statPGID(%q) = %d, %v; want %d, %v", tt.give, g, ok, tt.want, tt.ok)
		}
	}
}

// TestProcFSGroupListeners runs the /proc walk over a fake tree.
func TestProcFSGroupListeners(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	proc := func(pid, pgid int, sockets ...uint64) {
		dir := filepath.Join(root, fmt.Sprint(pid))
		must(os.MkdirAll(filepath.Join(dir, "fd"), 0o755))
		must(os.WriteFile(filepath.Join(dir, "stat"), fmt.Appendf(nil, "%d (srv) S 1 %d %d 0", pid, pgid, pgid), 0o644))
		for i, s := range sockets {
			must(os.Symlink(fmt.Sprintf("socket:[%d]", s), filepath.Join(dir, "fd", fmt.Sprint(3+i))))
		}
		must(os.Symlink("/dev/null", filepath.Join(dir, "fd", "0")))
	}
	proc(100, 100, 11)     // leader: loopback listener
	proc(101, 100, 12, 13) // child: wildcard listener and an established socket
	proc(200, 200, 21)     // another group: wildcard listener, not ours
	must(os.MkdirAll(filepath.Join(root, "net"), 0o755))
	tcp := procHeader +
		procLine(0, procHex(netip.MustParseAddrPort("127.0.0.1:80")), "0A", 11, false) +
		procLine(1, procHex(netip.MustParseAddrPort("0.0.0.0:81")), "0A", 12, false) +
		procLine(2, procHex(netip.MustParseAddrPort("10.0.0.1:82")), "01", 13, false) +
		procLine(3, procHex(netip.MustParseAddrPort("0.0.0.0:83")), "0A", 21, false)
	must(os.WriteFile(filepath.Join(root, "net", "tcp"), []byte(tcp), 0o644))
	got, err := procFS{root: root}.groupListeners(100)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"0.0.0.0:81"}, addrStrings(got)); diff != "" {
		t.Errorf("listeners (-want +got):\n%s", diff)
	}
	if got, err := (procFS{root: root}).groupListeners(300); err != nil || len(got) != 0 {
		t.Errorf("empty group: %v, %v", got, err)
	}
}

func addrStrings(aps []netip.AddrPort) []string {
	var out []string
	for _, a := range aps {
		out = append(out, a.String())
	}
	return out
}

func FuzzDecodeProcNetTCP(f *testing.F) {
	f.Add([]byte(procHeader+procLine(0, procHex(netip.MustParseAddrPort("127.0.0.1:8080")), "0A", 1, false)), false)
	f.Add([]byte(procHeader+procLine(0, procHex(netip.MustParseAddrPort("[::]:8080")), "0A", 2, true)), true)
	f.Add([]byte(procHeader+"0: 0:0 0:0 0A 0 0 0 0 0 x\n"), false)
	f.Add([]byte(""), true)
	f.Fuzz(func(t *testing.T, data []byte, v6 bool) {
		socks, err := decodeProcNetTCP(data, v6)
		if err != nil {
			if socks != nil {
				t.Fatal("sockets returned with an error")
			}
			return
		}
		if len(socks) > maxProcNetLines {
			t.Fatalf("%d sockets over the bound", len(socks))
		}
		for _, s := range socks {
			if s.Local.Addr().Is6() != v6 {
				t.Fatalf("address family of %s in a v6=%v table", s.Local, v6)
			}
		}
	})
}

// FuzzStatPGID: /proc/<pid>/stat carries the command name a workload chose
// (parentheses, spaces and newlines included). statPGID never panics, and
// for any command name it reads back the process group written after it.
func FuzzStatPGID(f *testing.F) {
	f.Add([]byte("12 (echo) S 1 12 12 0 -1"), "echo", int32(12))
	f.Add([]byte("12 (a) b) S 1 7 7"), "a) b", int32(7))
	f.Add([]byte("12 (x"), ") S 1 2 (", int32(-1))
	f.Add([]byte(")"), "\n)\n", int32(0))
	f.Fuzz(func(t *testing.T, raw []byte, comm string, pgrp int32) {
		_, _ = statPGID(raw)
		stat := fmt.Sprintf("4242 (%s) S 1 %d 4242 0 -1 4194560 101 0 0 0 0 0 0 0 20 0 1 0\n", comm, pgrp)
		if g, ok := statPGID([]byte(stat)); !ok || g != int(pgrp) {
			t.Fatalf("statPGID(%q) = %d, %v; want %d", stat, g, ok, pgrp)
		}
	})
}
