package lifecycle

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

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
			if err := EnsureDataDir(dir, zap.New(core)); err != nil {
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
	if err := EnsureDataDir(file, zap.NewNop()); err == nil {
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
		if got := LogEncoding(tt.format, tt.terminal); got != tt.want {
			t.Errorf("LogEncoding(%q, terminal %v) = %q, want %q", tt.format, tt.terminal, got, tt.want)
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if IsTerminal(w) {
		t.Error("a pipe reads as a terminal")
	}
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if IsTerminal(f) {
		t.Error("a regular file reads as a terminal")
	}
}

// TestStopWatch: once the stop begins, and only then, the components
// still running are named every interval until they have all returned.
func TestStopWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		core, logs := observer.New(zap.WarnLevel)
		var left stillRunning
		for _, name := range []string{"proxy", "mesh", "controller"} {
			left.add(name)
		}
		ctx, stop := context.WithCancel(t.Context())
		stopped, watched := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(watched)
			left.watch(ctx, stopped, 5*time.Second, zap.New(core))
		}()
		waitFor := func(d time.Duration, want int) {
			t.Helper()
			time.Sleep(d)
			synctest.Wait()
			if logs.Len() != want {
				t.Fatalf("%d warnings, want %d: %v", logs.Len(), want, logs.All())
			}
		}
		waitFor(time.Minute, 0) // running, not stopping
		stop()
		left.done("proxy")
		waitFor(4*time.Second, 0)
		waitFor(time.Second, 1)
		left.done("mesh")
		waitFor(5*time.Second, 2)
		for i, want := range []struct {
			names string
			after time.Duration
		}{{"[mesh controller]", 5 * time.Second}, {"[controller]", 10 * time.Second}} {
			e := logs.All()[i]
			if e.Message != "still stopping" || fmt.Sprint(e.ContextMap()["waiting_for"]) != want.names || e.ContextMap()["after"] != want.after {
				t.Errorf("warning %d = %q %v, want %s after %v", i, e.Message, e.ContextMap(), want.names, want.after)
			}
		}
		left.done("controller")
		close(stopped)
		<-watched
		waitFor(time.Minute, 2)
	})
}

// Durations read as durations in the console format ("5s") and as seconds
// in JSON, where a program reads them.
func TestLogDurations(t *testing.T) {
	for _, tc := range []struct{ format, want string }{
		{"console", "\t{\"interval\": \"5s\"}"},
		{"json", "\"interval\":5}"},
	} {
		var buf bytes.Buffer
		log := NewLogger(tc.format, zap.NewAtomicLevelAt(zap.InfoLevel), &buf)
		log.Info("adopter started", zap.Duration("interval", 5*time.Second))
		if !strings.Contains(buf.String(), tc.want) {
			t.Errorf("%s: %q does not contain %q", tc.format, buf.String(), tc.want)
		}
	}
}
