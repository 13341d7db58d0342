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

// fakeNvidiaSMI writes an executable shell script standing in for
// nvidia-smi.
func fakeNvidiaSMI(t *testing.T, body string) string {
	t.Helper()
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	path := filepath.Join(t.TempDir(), "nvidia-smi")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRunNvidiaSMI(t *testing.T) {
	path := fakeNvidiaSMI(t, `[ "$1 $2" = "`+strings.Join(NvidiaSMIArgs(), " ")+`" ] || { echo "bad args: $*" >&2; exit 2; }
echo "0, NVIDIA GeForce RTX 4090, GPU-1, 24564, 23987"`)
	out, err := runNvidiaSMI(context.Background(), path)
	if err != nil {
		t.Fatalf("runNvidiaSMI: %v", err)
	}
	if got, want := string(out), "0, NVIDIA GeForce RTX 4090, GPU-1, 24564, 23987\n"; got != want {
		t.Errorf("output = %q, want %q", got, want)
	}
}

func TestRunNvidiaSMIFailures(t *testing.T) {
	t.Run("exit status", func(t *testing.T) {
		if _, err := runNvidiaSMI(context.Background(), fakeNvidiaSMI(t, "exit 9")); err == nil {
			t.Fatal("a failing nvidia-smi gave no error")
		}
	})
	t.Run("too much output", func(t *testing.T) {
		path := fakeNvidiaSMI(t, `i=0; while [ $i -lt 2000 ]; do echo "0, padding padding padding padding padding, GPU-1, 1, 1"; i=$((i+1)); done`)
		if _, err := runNvidiaSMI(context.Background(), path); !errors.Is(err, errOutputTooLarge) {
			t.Fatalf("error = %v, want errOutputTooLarge", err)
		}
	})
	t.Run("killed at the deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		if _, err := runNvidiaSMI(ctx, fakeNvidiaSMI(t, "exec sleep 30")); err == nil {
			t.Fatal("a hung nvidia-smi gave no error")
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("runNvidiaSMI returned after %s", d)
		}
	})
}
