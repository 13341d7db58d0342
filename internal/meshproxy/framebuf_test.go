package meshproxy

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/proxy/proxytest"
)

// ssePair starts consumer a and serving node b (serving "chat" from base
// to a), both allowing streams concurrent streams, and waits until a
// resolves chat to b. Their keep-alive is long: 1,000 streams under the
// race detector on a loaded machine must not be taken for a dead link.
func ssePair(t *testing.T, base string, streams int) (a, b *meshNode) {
	t.Helper()
	nodes := newMeshNodesOpts(t, meshtest.Options{Keepalive: 3 * time.Second}, "a", "b")
	a, b = nodes[0], nodes[1]
	for _, n := range nodes {
		n.Config.MaxStreams = streams + 64
		n.Config.LivenessTimeout = 30 * time.Second
	}
	b.serve(base, "served-model", a)
	a.Table.AllowRemoteNode("chat", b.ID(), true)
	a.start(Deps{MaxInflightPerPeer: streams, MaxInflightTotal: streams}, b)
	b.start(Deps{MaxInflightPerPeer: streams, MaxInflightTotal: streams})
	b.admitLater(a)
	a.resolvesTo(b)
	return a, b
}

// firstWrite is a ResponseWriter that keeps what it is sent and closes
// first at its first body write.
type firstWrite struct {
	header http.Header
	once   sync.Once
	first  chan struct{}
	mu     sync.Mutex // guards body
	body   bytes.Buffer
}

func newFirstWrite() *firstWrite {
	return &firstWrite{header: make(http.Header), first: make(chan struct{})}
}

func (w *firstWrite) Header() http.Header { return w.header }
func (w *firstWrite) WriteHeader(int)     {}
func (w *firstWrite) Write(b []byte) (int, error) {
	w.mu.Lock()
	w.body.Write(b)
	w.mu.Unlock()
	w.once.Do(func() { close(w.first) })
	return len(b), nil
}

func heapInuse() uint64 {
	// Twice: pooled buffers survive one collection (sync.Pool's victim
	// cache).
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestIdleEventStreamsHoldLittle holds 1,000 event streams over the mesh
// past their first event, waiting for the next, and measures the heap
// both nodes (this process) hold for them: each stream's frame buffers
// are small then (StreamFirstBufBytes on each side), where each used to
// hold frameBufBytes (80 KiB) on each side, 160 KiB a stream.
func TestIdleEventStreamsHoldLittle(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 streams")
	}
	const n = 1000
	release := make(chan struct{})
	releaseAll := sync.OnceFunc(func() { close(release) })
	up := proxytest.New(t, proxytest.Options{Model: "served-model", Chunks: 2, Hooks: proxytest.Hooks{
		BeforeChunk: func(ctx context.Context, i int) {
			if i == 0 {
				return
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
		},
	}})
	a, b := ssePair(t, up.URL, n)
	body := []byte(chatBody(true))

	before := heapInuse()
	// No clock of its own: on a loaded machine 1,000 streams may take long
	// to open, which is not what this test measures. A stream that fails
	// ends the wait at once; one that hangs is ended by go test's -timeout
	// (waitFirst stops a minute before it, to say how far it got).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	writers := make([]*firstWrite, n)
	for i := range writers {
		w := newFirstWrite()
		writers[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
			r.Header.Set("Content-Type", "application/json")
			errs <- a.fwd.ForwardRemote(ctx, b.ID(), "chat", r, body, w)
		}()
	}
	defer func() {
		releaseAll()
		cancel()
		wg.Wait()
	}()
	var deadline <-chan time.Time // nil: no deadline but the test binary's
	if d, ok := t.Deadline(); ok {
		deadline = time.After(time.Until(d) - time.Minute)
	}
	for i, w := range writers {
		select {
		case <-w.first:
		case err := <-errs:
			t.Fatalf("stream ended before its first event: %v", err)
		case <-deadline:
			t.Fatalf("%d of %d streams had their first event before the test's -timeout", i, n)
		}
	}
	after := heapInuse()
	perStream := (int64(after) - int64(before)) / n
	t.Logf("heap in use: %d MB before, %d MB with %d idle streams: %d KiB a stream (both sides)",
		before>>20, after>>20, n, perStream>>10)
	// Both sides' large buffers alone were 160 KiB a stream (about 210
	// KiB in all); the small ones are 8 KiB, and the rest (QUIC stream
	// state, the HTTP connections to the upstream) about 35 KiB.
	if perStream > 64<<10 {
		t.Errorf("%d KiB of heap a stream, want at most 64 KiB", perStream>>10)
	}

	releaseAll()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
	}
	for _, w := range writers {
		if !strings.HasSuffix(w.body.String(), "data: [DONE]\n\n") {
			t.Fatalf("stream ended without [DONE]: %q", w.body.String())
		}
	}
}

// TestLargeEventAfterSmallOnes sends events of a few bytes, then one of
// 200 KiB (over a small buffer, and over MeshChunkBytes), then small ones
// again: the buffers of both sides grow for it, and the client gets every
// byte in order.
func TestLargeEventAfterSmallOnes(t *testing.T) {
	events := []string{
		"data: a\n\n",
		"data: " + strings.Repeat("x", 200<<10) + "\n\n",
		"data: " + strings.Repeat("y", StreamFirstBufBytes-10) + "\n\n",
		"data: [DONE]\n\n",
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		for _, e := range events {
			_, _ = w.Write([]byte(e))
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(up.Close)
	a, _ := ssePair(t, up.URL, 8)
	res, got := a.h.post("chat", "/v1/chat/completions", chatBody(true))
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", res.StatusCode, got)
	}
	if want := strings.Join(events, ""); string(got) != want {
		t.Fatalf("got %d bytes, want the %d the upstream sent", len(got), len(want))
	}
}

// TestReadFrameGrow reads frames of growing sizes into a small buffer:
// one that fits stays in it, a larger one swaps it for a large buffer, and
// one over the bound is refused before its payload is read.
func TestReadFrameGrow(t *testing.T) {
	var in bytes.Buffer
	small := bytes.Repeat([]byte("s"), 100)
	large := bytes.Repeat([]byte("l"), MeshChunkBytes)
	in.Write(appendBodyFrames(nil, frameRespBody, small))
	in.Write(appendBodyFrames(nil, frameRespBody, large))
	in.Write(append(mesh.AppendFrameHeader(nil, frameRespBody, MeshChunkBytes+1), bytes.Repeat([]byte("o"), MeshChunkBytes+1)...))
	pools := newFramePools()
	fb := pools.largeBuf()
	fb.shrink()
	defer fb.release()
	if _, p, err := readFrameGrow(&in, &fb, MeshChunkBytes); err != nil || !bytes.Equal(p, small) || !fb.small {
		t.Fatalf("small frame: %d bytes, small buffer %t, %v", len(p), fb.small, err)
	}
	if _, p, err := readFrameGrow(&in, &fb, MeshChunkBytes); err != nil || !bytes.Equal(p, large) || fb.small {
		t.Fatalf("large frame: %d bytes, small buffer %t, %v", len(p), fb.small, err)
	}
	if _, _, err := readFrameGrow(&in, &fb, MeshChunkBytes); err == nil {
		t.Fatal("a frame over the bound was read")
	}
}

// TestReadFrameGrowAllocatesNothing: a frame read into a pooled buffer
// costs no allocation, its header included (one a frame before).
func TestReadFrameGrowAllocatesNothing(t *testing.T) {
	frame := appendBodyFrames(nil, frameRespBody, []byte("data: x\n\n"))
	pools := newFramePools()
	fb := pools.largeBuf()
	defer fb.release()
	r := bytes.NewReader(frame)
	allocs := testing.AllocsPerRun(100, func() {
		r.Reset(frame)
		if _, _, err := readFrameGrow(r, &fb, MeshChunkBytes); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations a frame, want 0", allocs)
	}
}
