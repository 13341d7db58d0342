package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestEnsureDataDir: a new data dir is made 0700; one that exists with
// looser modes is tightened to 0700 and the daemon says so; a tight one is
// left alone, silently.
func TestEnsureDataDir(t *testing.T) {
	tests := []struct {
		name     string
		existing os.FileMode // 0 = absent
		wantLog  bool
	}{
		{"absent", 0, false},
		{"0755", 0o755, true},
		{"0750", 0o750, true},
		{"0701", 0o701, true},
		{"0700", 0o700, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			if tt.existing != 0 {
				if err := os.Mkdir(dir, tt.existing); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(dir, tt.existing); err != nil { // past the umask
					t.Fatal(err)
				}
			}
			core, logs := observer.New(zap.InfoLevel)
			if err := ensureDataDir(dir, zap.New(core)); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode().Perm(); got != 0o700 {
				t.Errorf("mode = %#o, want 0700", got)
			}
			entries := logs.FilterMessage("tightened the data dir's mode to 0700").All()
			if got := len(entries) == 1; got != tt.wantLog {
				t.Fatalf("logged %d tightenings, want one: %v", len(entries), tt.wantLog)
			}
			if tt.wantLog {
				if was := entries[0].ContextMap()["was"]; was != fmt.Sprintf("%#o", tt.existing) {
					t.Errorf("logged was=%v, want %#o", was, tt.existing)
				}
			}
		})
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ensureDataDir(file, zap.NewNop()); err == nil {
		t.Error("a file as data dir was accepted")
	}
}

// TestLogEncoding: auto is console on a terminal and json elsewhere;
// json and console are what they say wherever stderr goes.
func TestLogEncoding(t *testing.T) {
	tests := []struct {
		format   string
		terminal bool
		want     string
	}{
		{"auto", true, "console"},
		{"auto", false, "json"},
		{"json", true, "json"},
		{"json", false, "json"},
		{"console", true, "console"},
		{"console", false, "console"},
	}
	for _, tt := range tests {
		if got := logEncoding(tt.format, tt.terminal); got != tt.want {
			t.Errorf("logEncoding(%q, terminal %v) = %q, want %q", tt.format, tt.terminal, got, tt.want)
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if isTerminal(w) {
		t.Error("a pipe reads as a terminal")
	}
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) {
		t.Error("a regular file reads as a terminal")
	}
}
