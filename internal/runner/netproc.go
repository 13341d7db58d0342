package runner

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nodeld/nodeld/internal/grammar"
)

// tcpListenState is the st column of a LISTEN socket in /proc/net/tcp.
const tcpListenState = 0x0A

// procSocket is one line of /proc/net/tcp or /proc/net/tcp6.
type procSocket struct {
	// Local is the local address and port.
	Local netip.AddrPort
	// State is the kernel TCP state (tcpListenState for a listener).
	State uint8
	// Inode is the socket inode, matched against /proc/<pid>/fd links.
	Inode uint64
}

// errProcNet reports a /proc/net/tcp table that does not decode.
var errProcNet = errors.New("malformed /proc/net/tcp table")

// decodeProcNetTCP decodes a /proc/net/tcp (v6 false) or /proc/net/tcp6
// (v6 true) table. The first line is the column header. Each other line is
// "sl: local rem st tx:rx tr:when retrnsmt uid timeout inode ...", where an
// address is hex words in the kernel's byte order followed by ":" and the
// port in big-endian hex. Lines are counted before they are decoded and the
// table is refused beyond maxProcNetLines or maxProcNetBytes.
func decodeProcNetTCP(data []byte, v6 bool) ([]procSocket, error) {
	if len(data) > maxProcNetBytes {
		return nil, fmt.Errorf("%w: %d bytes exceeds %d", errProcNet, len(data), maxProcNetBytes)
	}
	header, rest, _ := bytes.Cut(data, []byte("\n"))
	if !bytes.Contains(header, []byte("local_address")) {
		return nil, fmt.Errorf("%w: no header", errProcNet)
	}
	var out []procSocket
	for n := 0; len(rest) > 0; n++ {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if n >= maxProcNetLines {
			return nil, fmt.Errorf("%w: more than %d sockets", errProcNet, maxProcNetLines)
		}
		s, err := decodeProcNetLine(line, v6)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %w", errProcNet, n+2, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// decodeProcNetLine decodes one socket line.
func decodeProcNetLine(line []byte, v6 bool) (procSocket, error) {
	f := strings.Fields(string(line))
	// sl local rem st tx:rx tr:when retrnsmt uid timeout inode
	if len(f) < 10 {
		return procSocket{}, fmt.Errorf("%d fields, want at least 10", len(f))
	}
	if !strings.HasSuffix(f[0], ":") {
		return procSocket{}, fmt.Errorf("slot %q", f[0])
	}
	local, err := decodeProcAddr(f[1], v6)
	if err != nil {
		return procSocket{}, fmt.Errorf("local address: %w", err)
	}
	if _, err := decodeProcAddr(f[2], v6); err != nil {
		return procSocket{}, fmt.Errorf("remote address: %w", err)
	}
	if len(f[3]) != 2 {
		return procSocket{}, fmt.Errorf("state %q", f[3])
	}
	st, err := strconv.ParseUint(f[3], 16, 8)
	if err != nil {
		return procSocket{}, fmt.Errorf("state %q", f[3])
	}
	inode, err := strconv.ParseUint(f[9], 10, 64)
	if err != nil {
		return procSocket{}, fmt.Errorf("inode %q", f[9])
	}
	return procSocket{Local: local, State: uint8(st), Inode: inode}, nil
}

// decodeProcAddr decodes "0100007F:1F90" (IPv4) or 32 hex digits ":" port
// (IPv6). Each 8-digit group is a 32-bit word printed in host byte order.
func decodeProcAddr(s string, v6 bool) (netip.AddrPort, error) {
	hexAddr, hexPort, ok := strings.Cut(s, ":")
	words := 1
	if v6 {
		words = 4
	}
	if !ok || len(hexAddr) != 8*words || len(hexPort) != 4 {
		return netip.AddrPort{}, fmt.Errorf("%q", s)
	}
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("port %q", hexPort)
	}
	var raw [16]byte
	for i := range words {
		w, err := strconv.ParseUint(hexAddr[8*i:8*i+8], 16, 32)
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("address %q", hexAddr)
		}
		binary.NativeEndian.PutUint32(raw[4*i:], uint32(w))
	}
	var ip netip.Addr
	if v6 {
		ip = netip.AddrFrom16(raw)
	} else {
		ip = netip.AddrFrom4([4]byte(raw[:4]))
	}
	return netip.AddrPortFrom(ip, uint16(port)), nil
}

// nonLoopbackListeners returns the LISTEN sockets among socks whose inode is
// in inodes and whose address is not loopback (127.0.0.0/8, ::1, or
// ::ffff:127.0.0.0/104). A wildcard address (0.0.0.0, ::) is not loopback.
func nonLoopbackListeners(socks []procSocket, inodes map[uint64]bool) []netip.AddrPort {
	var out []netip.AddrPort
	for _, s := range socks {
		if s.State != tcpListenState || !inodes[s.Inode] {
			continue
		}
		if grammar.IsLoopbackAddr(s.Local.Addr()) {
			continue
		}
		out = append(out, s.Local)
	}
	return out
}

// procFS reads the Linux /proc file system under root ("/proc" outside
// tests) to find what a process group listens on.
type procFS struct {
	root string
}

// groupListeners returns the non-loopback TCP listeners owned by any
// process of process group pgid.
func (p procFS) groupListeners(pgid int) ([]netip.AddrPort, error) {
	pids, err := p.groupPIDs(pgid)
	if err != nil {
		return nil, err
	}
	inodes := make(map[uint64]bool)
	for _, pid := range pids {
		// A process may exit while it is inspected: its descriptors are
		// gone, which is not an error.
		_ = p.socketInodes(pid, inodes)
	}
	if len(inodes) == 0 {
		return nil, nil
	}
	var out []netip.AddrPort
	for _, t := range []struct {
		name string
		v6   bool
	}{{"tcp", false}, {"tcp6", true}} {
		data, err := readFileBounded(filepath.Join(p.root, "net", t.name), maxProcNetBytes)
		if errors.Is(err, os.ErrNotExist) {
			continue // no IPv6 in this kernel
		}
		if err != nil {
			return nil, err
		}
		socks, err := decodeProcNetTCP(data, t.v6)
		if err != nil {
			return nil, err
		}
		out = append(out, nonLoopbackListeners(socks, inodes)...)
	}
	return out, nil
}

// groupPIDs lists the processes whose process group is pgid.
func (p procFS) groupPIDs(pgid int) ([]int, error) {
	d, err := os.Open(p.root)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", p.root, err)
	}
	defer d.Close()
	names, err := d.Readdirnames(maxProcsScanned)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read %s: %w", p.root, err)
	}
	var pids []int
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 0 {
			continue
		}
		stat, err := readFileBounded(filepath.Join(p.root, name, "stat"), maxProcStatBytes)
		if err != nil {
			continue // exited meanwhile
		}
		if g, ok := statPGID(stat); ok && g == pgid {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// statPGID reads the process group (the fifth field) from /proc/<pid>/stat.
// The command name (second field) is in parentheses and may hold spaces
// and parentheses, so fields are counted after its last ")".
func statPGID(stat []byte) (int, bool) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(stat[i+1:]))
	// state ppid pgrp
	if len(f) < 3 {
		return 0, false
	}
	g, err := strconv.Atoi(f[2])
	return g, err == nil
}

// socketInodes adds the inodes of pid's sockets to into.
func (p procFS) socketInodes(pid int, into map[uint64]bool) error {
	dir := filepath.Join(p.root, strconv.Itoa(pid), "fd")
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	names, err := d.Readdirnames(maxFDsScanned)
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	for _, name := range names {
		link, err := os.Readlink(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		if v, ok := strings.CutPrefix(link, "socket:["); ok {
			if n, err := strconv.ParseUint(strings.TrimSuffix(v, "]"), 10, 64); err == nil {
				into[n] = true
			}
		}
	}
	return nil
}

// readFileBounded reads at most limit bytes of name; a longer file is an
// error.
func readFileBounded(name string, limit int64) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s exceeds %d bytes", name, limit)
	}
	return data, nil
}
