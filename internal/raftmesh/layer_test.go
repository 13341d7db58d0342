package raftmesh

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
)

// dialWrite opens a raft stream from n to peer and sends one byte (the
// kind byte goes with it), with every deadline at meshtest.WaitTimeout.
func dialWrite(t *testing.T, n, peer *node) net.Conn {
	t.Helper()
	c, err := n.layer.Dial(raft.ServerAddress(peer.ID()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.SetDeadline(time.Now().Add(meshtest.WaitTimeout)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	return c
}

// A raft that does not accept fills the accept queue: the streams beyond
// it are refused with CodeBusy and counted, while the mesh goes on serving
// other kinds. Close then closes the queued streams: their peers' reads
// end, and so does a Read blocked on an accepted stream.
func TestAcceptQueueBoundedAndClose(t *testing.T) {
	nodes := newNodes(t, "a", "b")
	a, b := nodes[0], nodes[1]
	const queue = 2
	a.start(Config{Voters: ids(a, b), AcceptQueue: queue})
	b.start(Config{Voters: ids(a, b)}, a)
	a.Mesh.Handle(mesh.KindCtl, func(_ context.Context, _ mesh.PeerInfo, s *mesh.Stream) {
		_, _ = io.Copy(s, s)
		_ = s.CloseWrite()
	})
	link(t, a, b)

	var conns []net.Conn
	for range queue + 2 {
		conns = append(conns, dialWrite(t, b, a))
	}
	meshtest.WaitFor(t, "a to take every stream", func() bool {
		return a.streams("in", resultAccepted)+a.streams("in", resultQueueFull) == queue+2
	})
	if got := a.streams("in", resultQueueFull); got != 2 {
		t.Fatalf("a refused %d streams as busy, want 2", got)
	}
	busy := map[int]bool{}
	meshtest.WaitFor(t, "two streams to read CodeBusy", func() bool {
		for i, c := range conns {
			if busy[i] {
				continue
			}
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
			_, err := c.Read(make([]byte, 1))
			if code, ok := mesh.ResetCode(err); ok && code == CodeBusy {
				busy[i] = true
			}
		}
		return len(busy) == 2
	})
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(meshtest.WaitTimeout))
	}

	// The mesh's stream server is not blocked by the full queue.
	s, err := b.Mesh.OpenStream(context.Background(), a.ID(), mesh.KindCtl)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.SetDeadline(time.Now().Add(meshtest.WaitTimeout))
	if _, err := s.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	_ = s.CloseWrite()
	if got, err := io.ReadAll(s); err != nil || string(got) != "ping" {
		t.Fatalf("ctl echo with the raft queue full: %q, %v", got, err)
	}
	_ = s.Close()

	first, err := a.layer.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if first.RemoteAddr().String() != b.ID() || first.LocalAddr().String() != a.ID() || first.LocalAddr().Network() != "mesh" {
		t.Errorf("addresses %v -> %v", first.RemoteAddr(), first.LocalAddr())
	}
	read := make(chan error, 1)
	go func() {
		buf := make([]byte, 2)
		_, err := io.ReadFull(first, buf) // the byte sent, then blocks
		read <- err
	}()
	_ = a.layer.Close()
	select {
	case err := <-read:
		if err == nil {
			t.Error("read on a closed stream succeeded")
		}
	case <-time.After(meshtest.WaitTimeout):
		t.Fatal("Close did not unblock a Read")
	}
	if _, err := a.layer.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
	}
	for i, c := range conns {
		// Queued or refused, every stream ends (FIN or reset) well
		// before its deadline.
		var ne net.Error
		if _, err := io.ReadAll(c); errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("stream %d still open after Close", i)
		}
	}
	if got := int(testutilGauge(a)); got != 0 {
		t.Errorf("a has %d raft streams open after Close, want 0", got)
	}
	// A stream arriving after Close is refused as closed.
	c := dialWrite(t, b, a)
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("a closed layer answered a stream")
	}
	meshtest.WaitFor(t, "the stream refused as closed", func() bool { return a.streams("in", resultClosed) == 1 })
}

// Dial refuses a node outside the voter set before touching the mesh, and
// SetVoters closes the open streams of a voter it drops.
func TestDialOnlyVotersAndSetVoters(t *testing.T) {
	nodes := newNodes(t, "a", "b")
	a, b := nodes[0], nodes[1]
	a.start(Config{Voters: ids(a, b)})
	b.start(Config{Voters: ids(a, b)}, a)
	link(t, a, b)

	if _, err := b.layer.Dial("n-stranger", time.Second); !errors.Is(err, ErrNotVoter) {
		t.Fatalf("dial to a non-voter: %v, want ErrNotVoter", err)
	}
	if got := b.streams("out", resultNotVoter); got != 1 {
		t.Errorf("b counted %d refused dials, want 1", got)
	}
	c := dialWrite(t, b, a)
	in, err := a.layer.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := b.layer.SetVoters([]string{b.ID()}); err != nil {
		t.Fatal(err)
	}
	var ne net.Error
	if _, err := c.Read(make([]byte, 1)); err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Errorf("a dropped voter's stream is still open: read %v", err)
	}
	if b.layer.IsVoter(a.ID()) {
		t.Error("a is still a voter")
	}
	if _, err := b.layer.Dial(raft.ServerAddress(a.ID()), time.Second); !errors.Is(err, ErrNotVoter) {
		t.Errorf("dial to a dropped voter: %v", err)
	}
	if err := b.layer.SetVoters([]string{"", "x", "x"}); err == nil || !b.layer.IsVoter(b.ID()) {
		t.Errorf("SetVoters took a bad list: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{Voters: []string{"n-a", "n-b"}}).Validate(); err != nil {
		t.Fatal(err)
	}
	many := make([]string, MaxVoters+1)
	for i := range many {
		many[i] = strings.Repeat("n", i+1)
	}
	err := Config{Voters: append(many, "", "n"), AcceptQueue: MaxAcceptQueue + 1}.Validate()
	for _, want := range []string{"at most 9", "empty node id", `"n": listed twice`, "accept queue"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want %q", err, want)
		}
	}
	if _, err := New(Config{}, Deps{Self: "n-a", Logger: zap.NewNop()}); err == nil {
		t.Error("New without a mesh")
	}
}
