package dispatch

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap/zaptest"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
)

// localHost is a test workload host served in-process for "self".
type localHost struct {
	server *ctl.Server
	pub    ed25519.PublicKey
}

func newLocalHost(t testing.TB, ident *identity.Identity, h ctl.Handler) *localHost {
	t.Helper()
	v, err := ctl.NewVerifier(ctl.VerifierConfig{Self: ident.PublicKey(), Controllers: []ed25519.PublicKey{ident.PublicKey()}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := ctl.NewServer(ctl.ServerConfig{Verifier: v, Key: ident.PrivateKey(), Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	return &localHost{server: s, pub: ident.PublicKey()}
}

func (l *localHost) ServeLocal(ctx context.Context, s ctl.Stream) {
	_, _ = l.server.Serve(ctx, s, l.pub)
}

// runOperator starts an operator socket for d at path and stops it at
// cleanup.
func runOperator(t *testing.T, d *Dispatcher, path string) *OperatorServer {
	t.Helper()
	return runOperatorWith(t, OperatorDeps{Backend: d}, path)
}

// runOperatorWith starts an operator socket with deps at path and stops it
// at cleanup.
func runOperatorWith(t *testing.T, deps OperatorDeps, path string) *OperatorServer {
	t.Helper()
	deps.Logger = zaptest.NewLogger(t)
	o, err := NewOperatorServer(OperatorConfig{Path: path}, deps)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	select {
	case <-o.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("run: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
		if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket left behind: %v", err)
		}
	})
	return o
}

func describeHandler(ctx context.Context, req ctl.Request) (any, *ctl.Refusal) {
	switch req.Method {
	case ctl.MethodDescribe:
		return ctl.DescribeResult{Facts: json.RawMessage(`null`), Advertisement: json.RawMessage(`{}`), ChainHead: "head"}, nil
	case ctl.MethodStop:
		return nil, ctl.NewRefusal(ctl.CodeUnknownInstance, "no "+string(req.Method))
	}
	return nil, ctl.NewRefusal(ctl.CodeRuntime, "unexpected")
}

func TestOperatorSocket(t *testing.T) {
	ident := meshtest.NewIdentity(t)
	d := newDispatcher(t, ident, nil, newLocalHost(t, ident, describeHandler))
	dir := filepath.Join(t.TempDir(), "run")
	path := filepath.Join(dir, "nodeld.sock")
	runOperator(t, d, path)

	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Type() != os.ModeSocket || st.Mode().Perm() != SocketMode {
		t.Fatalf("socket mode %v, want socket %v", st.Mode(), SocketMode)
	}
	if dst, err := os.Stat(dir); err != nil || dst.Mode().Perm() != SocketDirMode {
		t.Fatalf("socket dir mode %v %v, want %v", dst.Mode(), err, SocketDirMode)
	}

	ctx := callCtx(t)
	tests := []struct {
		name string
		req  OperatorRequest
		want OperatorResponse
	}{
		{"describe self", OperatorRequest{Verb: VerbDescribe, Node: config.SelfRef},
			OperatorResponse{OK: true, Class: ClassOK, Node: ident.ID(), Result: json.RawMessage(`{"facts":null,"advertisement":{},"chain_head":"head"}`)}},
		{"refused stop", OperatorRequest{Verb: VerbStop, Node: config.SelfRef, Args: OperatorArgs{Instance: "i-1", GraceMS: 100}},
			OperatorResponse{Class: ClassRefused, Code: "unknown_instance", Reason: "no workload.stop"}},
		{"unknown verb", OperatorRequest{Verb: "frob", Node: config.SelfRef},
			OperatorResponse{Class: ClassError, Code: CodeBadRequest, Reason: `unknown verb "frob"`}},
		{"missing instance", OperatorRequest{Verb: VerbStart, Node: config.SelfRef},
			OperatorResponse{Class: ClassError, Code: CodeBadRequest, Reason: "start needs an instance"}},
		{"unknown node", OperatorRequest{Verb: VerbStatus, Node: "nobody"},
			OperatorResponse{Class: ClassUnreachable, Reason: `"nobody": no admitted peer by that name or id (no mesh)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DialOperator(ctx, path, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("response (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOperatorRefusesOversizedRequest(t *testing.T) {
	ident := meshtest.NewIdentity(t)
	d := newDispatcher(t, ident, nil, newLocalHost(t, ident, describeHandler))
	path := filepath.Join(t.TempDir(), "nodeld.sock")
	runOperator(t, d, path)

	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(waitTimeout))
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		// The server stops reading at the bound; this write then fails.
		_, _ = conn.Write([]byte(`{"verb":"describe","node":"` + strings.Repeat("x", MaxOperatorRequestBytes) + "\"}\n"))
	})
	line, err := bufio.NewReader(conn).ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	var resp OperatorResponse
	if err := json.Unmarshal(line, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Class != ClassError || resp.Code != CodeTooLarge {
		t.Fatalf("response %+v, want error too_large", resp)
	}
}

func TestOperatorStaleAndBusySocket(t *testing.T) {
	ident := meshtest.NewIdentity(t)
	d := newDispatcher(t, ident, nil, newLocalHost(t, ident, describeHandler))
	dir := t.TempDir()
	path := filepath.Join(dir, "nodeld.sock")

	// A stale socket file (its listener gone) is replaced.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	runOperator(t, d, path)
	if _, err := DialOperator(callCtx(t), path, OperatorRequest{Verb: VerbDescribe, Node: config.SelfRef}); err != nil {
		t.Fatal(err)
	}

	// A live one is not.
	o2, err := NewOperatorServer(OperatorConfig{Path: path}, OperatorDeps{Backend: d})
	if err != nil {
		t.Fatal(err)
	}
	if err := o2.Run(callCtx(t)); !errors.Is(err, ErrSocketInUse) {
		t.Fatalf("second server: %v, want ErrSocketInUse", err)
	}

	// A regular file at the path is never removed.
	file := filepath.Join(dir, "file.sock")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	o3, _ := NewOperatorServer(OperatorConfig{Path: file}, OperatorDeps{Backend: d})
	if err := o3.Run(callCtx(t)); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("run on a regular file: %v", err)
	}
}

func TestDialOperatorNoDaemon(t *testing.T) {
	_, err := DialOperator(callCtx(t), filepath.Join(t.TempDir(), "none.sock"), OperatorRequest{Verb: VerbDescribe, Node: config.SelfRef})
	if !errors.Is(err, ErrDaemonNotRunning) {
		t.Fatalf("err = %v, want ErrDaemonNotRunning", err)
	}
}

func TestOperatorSocketGroup(t *testing.T) {
	ident := meshtest.NewIdentity(t)
	d := newDispatcher(t, ident, nil, newLocalHost(t, ident, describeHandler))
	path := filepath.Join(t.TempDir(), "nodeld.sock")
	gid := os.Getgid()
	o, err := NewOperatorServer(OperatorConfig{Path: path, Group: strconv.Itoa(gid)}, OperatorDeps{Backend: d})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	select {
	case <-o.Ready():
	case err := <-done:
		t.Fatal(err)
	}
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != SocketGroupMode || int(st.Sys().(*syscall.Stat_t).Gid) != gid {
		t.Fatalf("socket %v gid %d, want %v gid %d", st.Mode(), st.Sys().(*syscall.Stat_t).Gid, SocketGroupMode, gid)
	}
}
