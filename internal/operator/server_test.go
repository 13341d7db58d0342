package operator

import (
	"bufio"
	"context"
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
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"

	"github.com/nodeld/nodeld/internal/config"
)

// waitTimeout bounds a test's wait for the server.
const waitTimeout = 15 * time.Second

func callCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// selfID is the node id the node backend answers as.
const selfID = "n-0123456789abcdef"

// nodeBackend stands for the dispatcher (the per-node verbs): describe
// answers, stop is refused, anything else is a bad request. The
// dispatcher's own answers are tested in package dispatch
// (TestDispatcherOperate).
type nodeBackend struct{}

func (nodeBackend) Verbs() []string { return []string{VerbDescribe, VerbPlace, VerbStop} }

func (nodeBackend) Operate(_ context.Context, req Request) Response {
	switch req.Verb {
	case VerbDescribe:
		return Response{OK: true, Class: ClassOK, Node: selfID, Result: json.RawMessage(`{"facts":null,"advertisement":{},"chain_head":"head"}`)}
	case VerbStop:
		return Response{Class: ClassRefused, Code: "unknown_instance", Reason: "no workload.stop"}
	}
	return Response{Class: ClassError, Code: CodeBadRequest, Reason: `unknown verb "` + req.Verb + `"`}
}

// runOperator starts an operator socket for backend b at path and stops
// it at cleanup.
func runOperator(t *testing.T, b Backend, path string) *Server {
	t.Helper()
	return runOperatorWith(t, Deps{Backend: b}, path)
}

// runOperatorWith starts an operator socket with deps at path and stops it
// at cleanup.
func runOperatorWith(t *testing.T, deps Deps, path string) *Server {
	t.Helper()
	deps.Logger = zaptest.NewLogger(t)
	o, err := NewServer(Config{Path: path}, deps)
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

// verbNodes is a verb a controller might add.
const verbNodes = "nodes"

// controllerBackend is what a controller's backend looks like: it serves
// its own verbs (here a place that picks the node, and nodes) and hands
// every other request to the Dispatcher.
type controllerBackend struct {
	d Backend
}

func (b controllerBackend) Verbs() []string { return append(b.d.Verbs(), verbNodes) }

func (b controllerBackend) Operate(ctx context.Context, req Request) Response {
	switch {
	case req.Verb == verbNodes:
		return Response{OK: true, Class: ClassOK, Result: json.RawMessage(`["n-1","n-2"]`)}
	case req.Verb == VerbPlace && req.Node == "":
		return Response{OK: true, Class: ClassOK, Node: "n-2", DecisionID: "d-1"}
	}
	return b.d.Operate(ctx, req)
}

func TestOperatorSocket(t *testing.T) {
	d := nodeBackend{}
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
		req  Request
		want Response
	}{
		{"describe self", Request{Verb: VerbDescribe, Node: config.SelfRef},
			Response{OK: true, Class: ClassOK, Node: selfID, Result: json.RawMessage(`{"facts":null,"advertisement":{},"chain_head":"head"}`)}},
		{"refused stop", Request{Verb: VerbStop, Node: config.SelfRef, Args: Args{Instance: "i-1", GraceMS: 100}},
			Response{Class: ClassRefused, Code: "unknown_instance", Reason: "no workload.stop"}},
		{"unknown verb", Request{Verb: "frob", Node: config.SelfRef},
			Response{Class: ClassError, Code: CodeBadRequest, Reason: `unknown verb "frob"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Dial(ctx, path, tt.req)
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
	d := nodeBackend{}
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
	var resp Response
	if err := json.Unmarshal(line, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Class != ClassError || resp.Code != CodeTooLarge {
		t.Fatalf("response %+v, want error too_large", resp)
	}
}

func TestOperatorStaleAndBusySocket(t *testing.T) {
	d := nodeBackend{}
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
	if _, err := Dial(callCtx(t), path, Request{Verb: VerbDescribe, Node: config.SelfRef}); err != nil {
		t.Fatal(err)
	}

	// A live one is not.
	o2, err := NewServer(Config{Path: path}, Deps{Backend: d})
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
	o3, _ := NewServer(Config{Path: file}, Deps{Backend: d})
	if err := o3.Run(callCtx(t)); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("run on a regular file: %v", err)
	}
}

func TestDialOperatorNoDaemon(t *testing.T) {
	_, err := Dial(callCtx(t), filepath.Join(t.TempDir(), "none.sock"), Request{Verb: VerbDescribe, Node: config.SelfRef})
	if !errors.Is(err, ErrDaemonNotRunning) {
		t.Fatalf("err = %v, want ErrDaemonNotRunning", err)
	}
}

func TestOperatorSocketGroup(t *testing.T) {
	d := nodeBackend{}
	path := filepath.Join(t.TempDir(), "nodeld.sock")
	gid := os.Getgid()
	o, err := NewServer(Config{Path: path, Group: strconv.Itoa(gid)}, Deps{Backend: d})
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

// The operator socket serves whatever backend it is given: a controller's
// verbs plug in beside the Dispatcher's, the wire format unchanged, and
// requests are counted under the backend's verbs.
func TestOperatorServesBackendVerbs(t *testing.T) {
	d := nodeBackend{}
	reg := prometheus.NewRegistry()
	path := filepath.Join(t.TempDir(), "nodeld.sock")
	o := runOperatorWith(t, Deps{Backend: controllerBackend{d: d}, Registerer: reg}, path)

	ctx := callCtx(t)
	tests := []struct {
		name string
		req  Request
		want Response
	}{
		{"controller verb", Request{Verb: verbNodes},
			Response{OK: true, Class: ClassOK, Result: json.RawMessage(`["n-1","n-2"]`)}},
		{"place without a node", Request{Verb: VerbPlace, Args: Args{PackageDir: "/p"}},
			Response{OK: true, Class: ClassOK, Node: "n-2", DecisionID: "d-1"}},
		{"dispatcher verb", Request{Verb: VerbDescribe, Node: config.SelfRef},
			Response{OK: true, Class: ClassOK, Node: selfID, Result: json.RawMessage(`{"facts":null,"advertisement":{},"chain_head":"head"}`)}},
		{"unknown verb", Request{Verb: "frob", Node: config.SelfRef},
			Response{Class: ClassError, Code: CodeBadRequest, Reason: `unknown verb "frob"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Dial(ctx, path, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("response (-want +got):\n%s", diff)
			}
		})
	}
	if n, err := testutil.GatherAndCount(reg, "nodeld_dispatch_operator_requests_total"); err != nil || n != 4 {
		t.Errorf("registered series %d (%v), want 4: the verb of an unknown request is not a label", n, err)
	}
	for _, tt := range []struct {
		verb, class string
		want        float64
	}{
		{verbNodes, ClassOK, 1}, {VerbPlace, ClassOK, 1}, {VerbDescribe, ClassOK, 1}, {"unknown", ClassError, 1}, {"frob", ClassError, 0},
	} {
		if got := testutil.ToFloat64(o.requests.WithLabelValues(tt.verb, tt.class)); got != tt.want {
			t.Errorf("requests{verb=%q,class=%q} = %v, want %v", tt.verb, tt.class, got, tt.want)
		}
	}
}

func TestNewOperatorServerNeedsBackend(t *testing.T) {
	if _, err := NewServer(Config{Path: filepath.Join(t.TempDir(), "s")}, Deps{}); err == nil {
		t.Fatal("no backend accepted")
	}
}
