package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestShippedBinaryHasNoTestFlags: the nodeld that ships (built without
// the nodeld_testhooks tag) shows no --test-* flag in nodeld run --help
// and refuses one, so no operator can turn a test hook on; the test build
// has them.
func TestShippedBinaryHasNoTestFlags(t *testing.T) {
	t.Parallel()
	out, _ := exec.Command(shippedBinary(t), "run", "--help").CombinedOutput()
	if !strings.Contains(string(out), "-chain-reset") {
		t.Fatalf("nodeld run --help shows no flags at all:\n%s", out)
	}
	if strings.Contains(string(out), "-test-") {
		t.Fatalf("the shipped nodeld run --help shows a test flag:\n%s", out)
	}
	out, err := exec.Command(shippedBinary(t), "run", "--test-hold-after-place").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "test-hold-after-place") {
		t.Fatalf("shipped nodeld run --test-hold-after-place = %v, want a usage error (2):\n%s", err, out)
	}
	out, _ = exec.Command(nodeldBinary(t), "run", "--help").CombinedOutput()
	for _, flag := range []string{"-test-clock-offset", "-test-hold-after-place", "-test-hold-before-place"} {
		if !strings.Contains(string(out), flag) {
			t.Errorf("the nodeld_testhooks build lacks %s:\n%s", flag, out)
		}
	}
}
