package meshproxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/table"
)

// FuzzServeConn feeds a served TLS connection's bytes (after the
// handshake) to the serving side's loop of exchanges: whatever they are,
// the loop never panics, ends once the connection does, and gives back
// every slot and held body byte.
func FuzzServeConn(f *testing.F) {
	fwd := servingForwarder(f)
	watches := runningWatchList(f)

	req := func(body string, n int64) []byte {
		b, err := appendJSONFrame(nil, frameReqHead, meshRequestHead{V: MeshWireVersion, Role: "chat", Method: "POST",
			Path: "/v1/chat/completions", ContentType: "application/json", BodyBytes: n})
		if err != nil {
			f.Fatal(err)
		}
		b = appendBodyFrames(b, frameReqBody, []byte(body))
		return mesh.AppendFrameHeader(b, frameReqEnd, 0)
	}
	one := req(`{"model":"x"}`, 13)
	f.Add(one)
	f.Add(append(append([]byte(nil), one...), one...))
	f.Add(append(append([]byte(nil), req(`{"model":"x"}`, -1)...), req(`[1]`, 3)...))
	f.Add(req(`{}`, 5))
	f.Add(one[:len(one)-3])
	f.Fuzz(func(t *testing.T, in []byte) {
		srv, cli := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			fwd.serveConnOn(context.Background(), mesh.PeerInfo{ID: servedPeer}, srv, srv, watches)
		}()
		read := make(chan struct{})
		go func() {
			defer close(read)
			_, _ = io.Copy(io.Discard, cli)
		}()
		_ = cli.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, _ = cli.Write(in)
		_ = cli.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the connection's loop did not end with the connection")
		}
		<-read
		if n, _ := fwd.Inflight(); n != 0 {
			t.Fatalf("%d slots held after the connection ended", n)
		}
		if h := fwd.held.Load(); h != 0 {
			t.Fatalf("%d body bytes held after the connection ended", h)
		}
	})
}

// servedPeer is the peer servingForwarder serves.
const servedPeer = "n-0123456789abcdef"

// runningWatchList is a watch list of served connections, run until the
// test ends.
func runningWatchList(tb testing.TB) *watchList {
	watches := newWatchList(TCPWatchDelay)
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		watches.run(ctx)
	}()
	tb.Cleanup(func() {
		stop()
		<-ran
	})
	return watches
}

// servingForwarder is a forwarder serving role chat to servedPeer from an
// upstream that answers {"ok":true}, on no mesh (it only serves, over
// connections the test hands it).
func servingForwarder(tb testing.TB) *Forwarder {
	tb.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	tb.Cleanup(up.Close)
	return servingForwarderOn(tb, up.URL)
}

// servingForwarderOn is servingForwarder with the instance at base.
func servingForwarderOn(tb testing.TB, base string) *Forwarder {
	tb.Helper()
	tbl := table.New("n-fedcba9876543210", table.Options{Admission: table.AdmitFunc(func(string) bool { return true })})
	if _, err := tbl.RegisterLocal(table.OriginAdopted, "chat", base, "m", "openai", "llama.cpp"); err != nil {
		tb.Fatal(err)
	}
	tbl.ExposeToMesh("chat", true)
	tbl.AllowMeshPeer("chat", servedPeer, true)
	fwd, err := NewForwarder(Deps{Mesh: noStreams{}, Table: tbl, MaxInflightPerPeer: 4, MaxInflightTotal: 4})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(fwd.CloseIdleConnections)
	return fwd
}

// noStreams is a mesh that opens no stream (the fuzz serves only).
type noStreams struct{}

func (noStreams) OpenStream(context.Context, string, mesh.StreamKind) (*mesh.Stream, error) {
	return nil, mesh.ErrNoLink
}
