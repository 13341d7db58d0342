package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSocketPathOf reads the socket path of malformed files, agrees with
// SocketPath on every shipped and test config that loads, and refuses
// forms it does not read.
func TestSocketPathOf(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"node:\n  name: a\n  data_dir: /srv/n # here\nadmin:\n  socket: \"/run/x.sock\"\ninference: [oops\n", "/run/x.sock"},
		{"node:\n  data_dir: '/srv/n'\nmesh: {{{\n", "/srv/n/nodeld.sock"},
		{"admin:\n  listen: 1\n  socket:\nnode:\n  data_dir: rel\n  nested:\n    socket: no\n", "rel/nodeld.sock"},
		{"log: ]\n", filepath.Join(DefaultDataDir, SocketName)},
	} {
		got, err := SocketPathOf([]byte(tc.text))
		if err != nil || got != tc.want {
			t.Errorf("SocketPathOf(%q) = %q, %v; want %q", tc.text, got, err, tc.want)
		}
	}
	for _, bad := range []string{"admin: {socket: /x}\n", "admin:\n  socket: *anchor\n", "node:\n  data_dir: \"/x\n"} {
		if got, err := SocketPathOf([]byte(bad)); err == nil {
			t.Errorf("SocketPathOf(%q) = %q, want an error", bad, got)
		}
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "*.good.yaml"))
	more, _ := filepath.Glob(filepath.Join("..", "..", "configs", "*", "*.yaml"))
	top, _ := filepath.Glob(filepath.Join("..", "..", "configs", "*.yaml"))
	for _, file := range append(append(files, more...), top...) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := Parse(data)
		if err != nil {
			continue
		}
		if got, err := SocketPathOf(data); err != nil || got != cfg.SocketPath() {
			t.Errorf("%s: SocketPathOf = %q, %v; SocketPath %q", file, got, err, cfg.SocketPath())
		}
	}
	if got, err := SocketPathOf([]byte(strings.Repeat("#", MaxConfigBytes+1))); err == nil {
		t.Errorf("an oversized file gave %q", got)
	}
}

// FuzzSocketPathOf: any bytes give a path or an error, never a panic;
// a file that decodes and whose reading succeeds gives SocketPath's
// answer when its two keys are plain block-style values.
func FuzzSocketPathOf(f *testing.F) {
	f.Add([]byte("node:\n  data_dir: /srv/n\nadmin:\n  socket: /run/x.sock\n"))
	f.Add([]byte("admin: {socket: /x}\n"))
	f.Add([]byte("node:\n  data_dir: \"/x\" # c\n"))
	f.Add(Embedded())
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := SocketPathOf(data)
		if err == nil && p == "" {
			t.Fatal("no path and no error")
		}
	})
}
