//go:build linux

package operator

import (
	"os"
	"path/filepath"
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
