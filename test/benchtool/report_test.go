package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReport checks the comparison table: medians over rounds of the
// per-round differences and ratios against direct, the CPU column, and a
// clear error for a malformed line.
func TestReport(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "results.txt")
	lines := []string{
		"1 direct 1 100 200 1000 0 0",
		"1 direct 64 900 3000 20000 0 0",
		"1 proxy 1 150 400 900 0 0 0",
		"1 proxy 64 1200 4000 10000 0 0 40.5",
		"2 direct 1 110 210 1000 0 0",
		"2 direct 64 950 3100 10000 0 0",
		"2 proxy 1 170 300 900 0 2 0",
		"2 proxy 64 1300 4200 6000 1 0 50.5",
		"3 direct 1 90 190 1000 0 0",
		"3 direct 64 800 2900 20000 0 0",
		"3 proxy 1 200 500 900 0 0 0",
		"3 proxy 64 1250 4100 12000 0 0 45.5",
	}
	if err := os.WriteFile(good, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := runReport([]string{good}, &out); err != nil {
		t.Fatal(err)
	}
	// Added p50 per round: 50, 60, 110 -> 60; added p99: 200, 90, 310 -> 200;
	// share: 0.5, 0.6, 0.6 -> 0.60; CPU 40.5, 50.5, 45.5 -> 45.5 (prints 46).
	want := "| proxy | 170 µs | +60 µs | +200 µs | 10000 | 0.60 | 46 µs | 3 |"
	if !strings.Contains(out.String(), want) {
		t.Errorf("report:\n%s\nwant the line %s", out.String(), want)
	}
	if !strings.Contains(out.String(), "| direct | 100 µs | 0 | 0 | 20000 | 1.00 | - | 0 |") {
		t.Errorf("report:\n%s\nlacks the direct line", out.String())
	}

	bad := filepath.Join(dir, "bad.txt")
	if err := os.WriteFile(bad, []byte("1 direct 1 100 x 1000 0 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := runReport([]string{bad}, &out); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("malformed line: error %v, want one naming line 1", err)
	}
}
