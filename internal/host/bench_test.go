package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"testing"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/pkg"
)

// BenchmarkArtifactFetch fetches a generated 256 MiB file over real QUIC
// on loopback from the test-side artifact server, with every piece and
// the whole file hashed and written to disk, and reports MB/s.
func BenchmarkArtifactFetch(b *testing.B) {
	const size = 256 << 20
	c := newCluster(b, clusterOpts{noRun: true})
	block := make([]byte, ctl.MaxPieceBytes)
	for i := range block {
		block[i] = byte(i*7 + i>>9)
	}
	g := &genFile{block: block, sum: sha256.Sum256(block), size: size}
	whole := sha256.New()
	for range size / ctl.MaxPieceBytes {
		whole.Write(block) // hashed once, for the manifest entry
	}
	c.srv.gen = g
	f := pkg.File{Path: "model.bin", Size: size, SHA256: hex.EncodeToString(whole.Sum(nil))}
	open := func(ctx context.Context) (io.ReadWriteCloser, error) {
		s, err := c.hostNode.Mesh.OpenStream(ctx, c.caller.Ident.ID(), mesh.KindArtifact)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	b.SetBytes(size)
	b.ResetTimer()
	for b.Loop() {
		dir := b.TempDir()
		root, err := os.OpenRoot(dir)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := fetchFile(context.Background(), open, testDecision, root, f, nil); err != nil {
			b.Fatal(err)
		}
		root.Close()
		_ = os.RemoveAll(dir)
	}
}
