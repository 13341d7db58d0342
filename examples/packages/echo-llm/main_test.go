package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHealthFile: --health-file receives the moment of the first 200
// answer to GET /health, taken before the answer is sent (so it is never
// later than what the prober saw), once: neither a 503 while loading nor
// a later 200 writes it.
func TestHealthFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "health")
	s := &server{model: "echo-1", healthFile: file}
	srv := httptest.NewServer(s.routes())
	t.Cleanup(srv.Close)
	get := func() (int, time.Time) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, time.Now()
	}
	read := func() (time.Time, bool) {
		t.Helper()
		raw, err := os.ReadFile(file)
		if os.IsNotExist(err) {
			return time.Time{}, false
		}
		if err != nil {
			t.Fatal(err)
		}
		at, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(raw)))
		if err != nil {
			t.Fatalf("health file %q: %v", raw, err)
		}
		return at, true
	}

	if code, _ := get(); code != http.StatusServiceUnavailable {
		t.Fatalf("GET /health while loading = %d, want 503", code)
	}
	if _, ok := read(); ok {
		t.Fatal("the health file was written by a 503 answer")
	}
	s.ready.Store(true)
	before := time.Now()
	code, answered := get()
	if code != http.StatusOK {
		t.Fatalf("GET /health once ready = %d, want 200", code)
	}
	if code, _ := get(); code != http.StatusOK {
		t.Fatalf("second GET /health = %d", code)
	}
	// The file is written just after the answer is sent; Close waits for
	// the handlers, so it is there now.
	srv.Close()
	first, ok := read()
	if !ok {
		t.Fatal("no health file after a 200 answer")
	}
	// A second write (the second 200's moment) would be after answered.
	if first.Before(before) || first.After(answered) {
		t.Fatalf("health moment %s outside the first 200's span [%s, %s]", first, before, answered)
	}
}
