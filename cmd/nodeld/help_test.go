package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestHelpExitsZero: asking a command for its help is not a usage error.
// Each form prints what the command takes and exits 0, without the
// "flag: help requested" error line Go's flag package returns.
func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{
		{"--help"},
		{"help"},
		{"run", "--help"},
		{"keygen", "-h"},
		{"id", "--help"},
		{"status", "--help"},
		{"config", "--help"},
		{"config", "check", "--help"},
		{"chain", "--help"},
		{"chain", "verify", "-h"},
		{"package", "--help"},
		{"package", "keygen", "--help"},
		{"package", "sign", "--help"},
		{"package", "add", "--help"},
		{"package", "revoke", "--help"},
		{"ctl", "--help"},
		{"ctl", "place", "--help"},
	} {
		var out, errb bytes.Buffer
		rc := exitCode(run(context.Background(), args, &out, &errb), &errb)
		if rc != 0 {
			t.Errorf("nodeld %s: exit %d, want 0; stderr:\n%s", strings.Join(args, " "), rc, errb.String())
		}
		if strings.Contains(errb.String(), "help requested") {
			t.Errorf("nodeld %s: stderr has the flag package's error:\n%s", strings.Join(args, " "), errb.String())
		}
		if out.Len()+errb.Len() == 0 {
			t.Errorf("nodeld %s printed nothing", strings.Join(args, " "))
		}
	}

	// A flag that does not exist is still a usage error.
	var out, errb bytes.Buffer
	if rc := exitCode(run(context.Background(), []string{"status", "--bogus"}, &out, &errb), &errb); rc != 2 {
		t.Errorf("nodeld status --bogus: exit %d, want 2", rc)
	}
}

// TestUsageNamesEveryVerb: the top-level usage names every ctl verb and
// every package command the commands' own usages list, so `nodeld --help`
// does not hide a verb the README uses (ctl nodes, package add).
func TestUsageNamesEveryVerb(t *testing.T) {
	verbs := map[string]string{} // verb -> which usage lists it
	inVerbs := false
	for _, line := range strings.Split(ctlUsage, "\n") {
		if strings.HasPrefix(line, "Verbs") {
			inVerbs = true
			continue
		}
		if inVerbs && strings.TrimSpace(line) == "" {
			break
		}
		// Verb lines are indented two spaces; continuation lines more.
		if inVerbs && strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "   ") {
			verbs[strings.Fields(line)[0]] = "ctl"
		}
	}
	for _, line := range strings.Split(packageUsage, "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == "nodeld" && f[1] == "package" {
			verbs[f[2]] = "package"
		}
	}
	if len(verbs) < 15 {
		t.Fatalf("found %d verbs in the ctl and package usages, want at least 15: %v", len(verbs), verbs)
	}
	for verb, cmd := range verbs {
		// A whole word: "add" must not match in "--addr".
		if !regexp.MustCompile(`(^|[^a-z-])` + verb + `([^a-z-]|$)`).MatchString(usage) {
			t.Errorf("nodeld --help does not name %s verb %q", cmd, verb)
		}
	}
}

// TestRevocationsHelpListsItsFlags: package revocations only lists, so
// its --help shows --config alone, and a revoke flag given to it is a
// usage error, as is a stray argument; revoke keeps its flags.
func TestRevocationsHelpListsItsFlags(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if rc := exitCode(run(context.Background(), []string{"package", "revocations", "--help"}, &out, &errb), &errb); rc != 0 {
		t.Fatalf("package revocations --help: exit %d:\n%s", rc, errb.String())
	}
	for _, flag := range []string{"-kind", "-mesh", "-reason"} {
		if strings.Contains(errb.String(), flag) {
			t.Errorf("package revocations --help lists %s, which it does not take:\n%s", flag, errb.String())
		}
	}
	// A config of its own, so that a command that wrongly goes on to
	// list makes its data dir in a temp dir, not here.
	cfg := filepath.Join(t.TempDir(), "nodeld.yaml")
	if err := os.WriteFile(cfg, []byte("node:\n  data_dir: "+filepath.Join(filepath.Dir(cfg), "data")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"package", "revocations", "--config", cfg, "--mesh"},
		{"package", "revocations", "--config", cfg, "--kind", "package"},
		{"package", "revocations", "--config", cfg, "stray"},
	} {
		out.Reset()
		errb.Reset()
		if rc := exitCode(run(context.Background(), args, &out, &errb), &errb); rc != 2 {
			t.Errorf("nodeld %s: exit %d, want 2 (usage)", strings.Join(args, " "), rc)
		}
	}
	out.Reset()
	errb.Reset()
	if rc := exitCode(run(context.Background(), []string{"package", "revoke", "--help"}, &out, &errb), &errb); rc != 0 {
		t.Fatalf("package revoke --help: exit %d", rc)
	}
	for _, flag := range []string{"-kind", "-mesh", "-reason", "-config"} {
		if !strings.Contains(errb.String(), flag) {
			t.Errorf("package revoke --help lacks %s:\n%s", flag, errb.String())
		}
	}
}
