package nodeld_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemdUnitVerifies runs `systemd-analyze verify` on the shipped unit
// when the tool exists (it does on any systemd host and in CI). The binary
// path is pointed at an executable that exists here: the test binary.
func TestSystemdUnitVerifies(t *testing.T) {
	tool, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed; the unit is checked where systemd is")
	}
	unit, err := os.ReadFile(filepath.Join("deploy", "systemd", "nodeld.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Type=notify", "WatchdogSec=", "Restart=on-failure", "StateDirectory=nodeld",
		"RuntimeDirectory=nodeld", "ConfigurationDirectory=nodeld", "NoNewPrivileges=yes",
		"ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "RestrictAddressFamilies=",
		"CapabilityBoundingSet=", "SystemCallFilter=@system-service", "ExecReload=",
	} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("unit lacks %q", want)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	verifyUnit(t, tool, string(unit), "/usr/local/bin/nodeld", self)
}

// verifyUnit runs `systemd-analyze verify` on the unit text with its binary
// path bin replaced by an executable that exists here (verify checks that
// ExecStart= can run), and fails on any complaint.
func verifyUnit(t *testing.T, tool, text, bin, here string) {
	t.Helper()
	if !strings.Contains(text, "ExecStart="+bin+" ") {
		t.Fatalf("unit's ExecStart= does not run %s", bin)
	}
	path := filepath.Join(t.TempDir(), "nodeld.service")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(text, bin, here)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tool, "verify", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) != 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// unitValues returns the values of every KEY= line of a unit, in order.
func unitValues(text, key string) []string {
	var vals []string
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+"="); ok {
			vals = append(vals, v)
		}
	}
	return vals
}
