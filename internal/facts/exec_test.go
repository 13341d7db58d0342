package facts

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeProgram writes an executable shell script standing in for a
// program Probe runs.
func fakeProgram(t *testing.T, name, body string) string {
	t.Helper()
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRunCommand(t *testing.T) {
	path := fakeProgram(t, "nvidia-smi", `[ "$1 $2" = "`+strings.Join(NvidiaSMIArgs(), " ")+`" ] || { echo "bad args: $*" >&2; exit 2; }
echo "0, NVIDIA GeForce RTX 4090, GPU-1, 24564, 23987, 5"
echo "noise on stderr" >&2`)
	out, err := runCommand(context.Background(), path, NvidiaSMIArgs(), false)
	if err != nil {
		t.Fatalf("runCommand: %v", err)
	}
	if got, want := string(out), "0, NVIDIA GeForce RTX 4090, GPU-1, 24564, 23987, 5\n"; got != want {
		t.Errorf("output = %q, want %q", got, want)
	}
}

func TestRunCommandWithStderr(t *testing.T) {
	// llama-server prints its version on stderr.
	path := fakeProgram(t, "llama-server", `echo "version: 4567 (3d1f2a9b)" >&2; echo "built with cc" >&2`)
	out, err := runCommand(context.Background(), path, []string{"--version"}, true)
	if err != nil {
		t.Fatalf("runCommand: %v", err)
	}
	if got := parseVersion(out); got != "4567" {
		t.Errorf("version %q from %q, want 4567", got, out)
	}
}

func TestRunCommandFailures(t *testing.T) {
	t.Run("exit status", func(t *testing.T) {
		if _, err := runCommand(context.Background(), fakeProgram(t, "x", "exit 9"), nil, false); err == nil {
			t.Fatal("a failing program gave no error")
		}
	})
	t.Run("too much output", func(t *testing.T) {
		path := fakeProgram(t, "x", `i=0; while [ $i -lt 2000 ]; do echo "0, padding padding padding padding padding, GPU-1, 1, 1, 1"; i=$((i+1)); done`)
		if _, err := runCommand(context.Background(), path, nil, false); !errors.Is(err, errOutputTooLarge) {
			t.Fatalf("error = %v, want errOutputTooLarge", err)
		}
	})
	t.Run("too much output on stderr", func(t *testing.T) {
		path := fakeProgram(t, "x", `i=0; while [ $i -lt 2000 ]; do echo "padding padding padding padding padding padding" >&2; i=$((i+1)); done`)
		if _, err := runCommand(context.Background(), path, nil, true); !errors.Is(err, errOutputTooLarge) {
			t.Fatalf("error = %v, want errOutputTooLarge", err)
		}
	})
	t.Run("killed at the deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		if _, err := runCommand(ctx, fakeProgram(t, "x", "exec sleep 30"), nil, false); err == nil {
			t.Fatal("a hung program gave no error")
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("runCommand returned after %s", d)
		}
	})
}
