package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/dispatch"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/operator"
)

// runCtl runs cmdCtl in-process and returns its output and exit status.
func runCtl(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	rc := exitCode(cmdCtl(ctx, args, &out, &errb), &errb)
	return out.String(), errb.String(), rc
}

// selfHost serves ctl calls to "self" for the operator socket under test.
type selfHost struct {
	server *ctl.Server
	pub    ed25519.PublicKey
}

func (h *selfHost) ServeLocal(ctx context.Context, s ctl.Stream) {
	_, _ = h.server.Serve(ctx, s, h.pub)
}

// startOperator runs a dispatcher's operator socket whose "self" host
// answers describe, refuses stop and is otherwise unknown.
func startOperator(t *testing.T) (string, *identity.Identity) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := identity.New(priv)
	if err != nil {
		t.Fatal(err)
	}
	v, err := ctl.NewVerifier(ctl.VerifierConfig{Self: id.PublicKey(), Controllers: []ed25519.PublicKey{id.PublicKey()}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ctl.NewServer(ctl.ServerConfig{Verifier: v, Key: priv, Handler: func(ctx context.Context, req ctl.Request) (any, *ctl.Refusal) {
		switch req.Method {
		case ctl.MethodDescribe:
			return ctl.DescribeResult{Facts: json.RawMessage(`null`), Advertisement: json.RawMessage(`{"service":"workload-host"}`), ChainHead: "abc"}, nil
		case ctl.MethodStatus:
			return ctl.StatusList{InFlight: []string{}, Instances: []ctl.InstanceStatus{{InstanceID: "echo-1", Package: "echo", Variant: "default", Status: ctl.InstanceState{State: "running"}, Lifecycle: "running"}}}, nil
		}
		return nil, ctl.NewRefusal(ctl.CodeUnknownInstance, "no such instance")
	}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ch, _, err := chain.Open(filepath.Join(dir, "chain.log"), priv, chain.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatch.New(dispatch.Deps{Identity: id, Chain: ch, Local: &selfHost{server: srv, pub: id.PublicKey()}})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "nodeld.sock")
	// The daemon's backend, on a node without a controller.
	router, err := operator.NewRouter(operator.RouterDeps{Dispatcher: d, NodeID: id.ID()})
	if err != nil {
		t.Fatal(err)
	}
	o, err := operator.NewServer(operator.Config{Path: sock}, operator.Deps{Backend: router})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		_ = ch.Close()
	})
	select {
	case <-o.Ready():
	case err := <-done:
		t.Fatal(err)
	}
	return sock, id
}

func TestCtlAgainstOperatorSocket(t *testing.T) {
	t.Parallel()
	sock, id := startOperator(t)
	tests := []struct {
		name    string
		args    []string
		rc      int
		out     string // substring of stdout
		errText string // substring of stderr
	}{
		{"describe", []string{"describe", "self"}, 0, "chain head:    abc", ""},
		{"describe json", []string{"--json", "describe", "self"}, 0, `"chain_head": "abc"`, ""},
		{"status list", []string{"status", "self"}, 0, "echo-1", ""},
		{"refused stop", []string{"stop", "self", "echo-1", "--grace", "3s"}, 1, "", "unknown_instance: no such instance"},
		{"unknown node", []string{"describe", "gpu-9"}, 3, "", "unreachable"},
		{"bad package", []string{"place", "self", t.TempDir()}, 1, "", "place:"},
		// Without a controller, its verbs and place's controller-only
		// arguments are refused, saying why.
		{"place without a node", []string{"place", t.TempDir()}, 1, "", "no_controller: place without a node (the engine chooses) needs a controller"},
		{"dry run", []string{"place", "--dry-run", "self", t.TempDir()}, 1, "", "no_controller: place --dry-run needs a controller"},
		{"prefer", []string{"place", "--prefer", "b,c", "self", t.TempDir()}, 1, "", "no_controller"},
		{"allow emulated", []string{"place", "--allow-emulated", "self", t.TempDir()}, 1, "", "no_controller: place --allow-emulated needs a controller"},
		{"package id", []string{"place", "self", "echo-llm@0.1.0"}, 1, "", "no_controller: place by package id"},
		{"explain", []string{"explain", strings.Repeat("0", 64)}, 1, "", "no_controller: explain needs a controller"},
		{"placements", []string{"placements"}, 1, "", "no_controller"},
		{"start by id", []string{"start", "echo-1"}, 1, "", "no_controller: start without a node (of an instance the controller placed) needs a controller"},
		{"nodes", []string{"nodes"}, 1, "", "no_controller"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, rc := runCtl(t, append([]string{"--socket", sock}, tt.args...)...)
			if rc != tt.rc || !strings.Contains(out, tt.out) || !strings.Contains(errOut, tt.errText) {
				t.Fatalf("ctl %v = %d\nstdout %q\nstderr %q\nwant %d, %q, %q", tt.args, rc, out, errOut, tt.rc, tt.out, tt.errText)
			}
		})
	}
	if out, _, _ := runCtl(t, "--socket", sock, "describe", "self"); !strings.Contains(out, id.ID()) {
		t.Fatalf("describe does not name the node: %q", out)
	}
}

func TestCtlUsageAndNoDaemon(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "n.yaml")
	if err := os.WriteFile(cfg, []byte(nodeConfig(filepath.Join(dir, "data"), "")), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		rc      int
		errText string
	}{
		{"no verb", []string{"--config", cfg}, 2, "no verb"},
		{"unknown verb", []string{"--config", cfg, "frob", "self"}, 2, `unknown verb "frob"`},
		{"missing instance", []string{"--config", cfg, "stop", "self"}, 2, "wrong number of arguments"},
		{"start without arguments", []string{"--config", cfg, "start"}, 2, "wrong number of arguments"},
		{"start of an id is no usage error", []string{"--config", cfg, "start", "echo-1"}, 3, "is nodeld running?"},
		{"flag of another verb", []string{"--config", cfg, "start", "self", "i", "--grace", "1s"}, 2, "--grace does not apply"},
		{"bad flag", []string{"--config", cfg, "--frob", "describe", "self"}, 2, "frob"},
		{"place with three arguments", []string{"--config", cfg, "place", "a", "b", "c"}, 2, "wrong number of arguments"},
		{"place of neither a dir nor an id", []string{"--config", cfg, "place", "self", filepath.Join(dir, "none")}, 2, "neither a package directory nor a package id"},
		{"prefer on start", []string{"--config", cfg, "start", "self", "i", "--prefer", "b"}, 2, "--prefer does not apply"},
		{"allow-emulated on stop", []string{"--config", cfg, "stop", "self", "i", "--allow-emulated"}, 2, "--allow-emulated does not apply"},
		{"explain without an id", []string{"--config", cfg, "explain"}, 2, "wrong number of arguments"},
		{"explain of a bad id", []string{"--config", cfg, "explain", "abc"}, 2, "not a decision id"},
		{"explain of a short prefix", []string{"--config", cfg, "explain", "abcdef1"}, 2, "not a decision id"},
		{"placements with an argument", []string{"--config", cfg, "placements", "x"}, 2, "wrong number of arguments"},
		{"no daemon", []string{"--config", cfg, "describe", "self"}, 3, "is nodeld running?"},
		{"missing config", []string{"--config", filepath.Join(dir, "none.yaml"), "describe", "self"}, 2, "none.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errOut, rc := runCtl(t, tt.args...)
			if rc != tt.rc || !strings.Contains(errOut, tt.errText) {
				t.Fatalf("ctl %v = %d %q, want %d with %q", tt.args, rc, errOut, tt.rc, tt.errText)
			}
		})
	}
}
