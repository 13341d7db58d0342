//go:build linux

package operator

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/config"
)

// A peer RefusePeer names (a placed instance's process) is refused before
// its request is read; the kernel's credentials of the peer are what
// RefusePeer is asked about.
func TestOperatorRefusesInstancePeer(t *testing.T) {
	d := nodeBackend{}
	type cred struct {
		pid int
		uid uint32
	}
	asked := make(chan cred, 1)
	refuse := true
	path := filepath.Join(t.TempDir(), "nodeld.sock")
	runOperatorWith(t, Deps{Backend: d, RefusePeer: func(pid int, uid uint32) bool {
		asked <- cred{pid, uid}
		return refuse
	}}, path)
	got, err := Dial(callCtx(t), path, Request{Verb: VerbDescribe, Node: config.SelfRef})
	if err != nil {
		t.Fatal(err)
	}
	want := Response{Class: ClassError, Code: CodeForbidden, Reason: "a placed instance may not use the operator socket"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("response (-want +got):\n%s", diff)
	}
	if c := <-asked; c.pid != os.Getpid() || c.uid != uint32(os.Getuid()) {
		t.Errorf("RefusePeer asked about %+v, want this process (%d, uid %d)", c, os.Getpid(), os.Getuid())
	}
}

// A refusal written and the connection closed before the client's request
// was written (the server refuses a peer before it reads): the client
// gets the refusal, not the write's broken pipe. The server below does
// exactly that, and finishes before the client writes.
func TestDialReadsRefusalSentBeforeRequest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	want := Response{Class: ClassError, Code: CodeForbidden, Reason: "a placed instance may not use the operator socket"}
	served := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		writeResponse(conn, want)
		served <- conn.Close()
	}()
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	// The request is larger than the socket's buffers: its write fails
	// whatever the kernel lets a closed peer's socket take.
	got, err := exchange(conn, Request{Verb: VerbDescribe, Node: strings.Repeat("x", MaxOperatorRequestBytes/2)})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("response (-want +got):\n%s", diff)
	}
}
