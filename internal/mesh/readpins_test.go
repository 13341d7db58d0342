package mesh

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/identity"
)

// TestReadPins: what config check reads of the first-contact pins: none
// without a file, each pinned address's node id, and a damaged file's
// error.
func TestReadPins(t *testing.T) {
	dir := t.TempDir()
	if pins, err := ReadPins(dir); err != nil || len(pins) != 0 {
		t.Fatalf("no file: %v, %v", pins, err)
	}
	id, err := identity.Generate(filepath.Join(dir, "k"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, KnownPeersFile)
	if err := writeKnownPeers(path, map[string]knownPeer{"127.0.0.1:7401": {Addr: "127.0.0.1:7401", Key: id.PublicKeyHex(), PinnedAt: time.Unix(1, 0)}}); err != nil {
		t.Fatal(err)
	}
	pins, err := ReadPins(dir)
	if err != nil || len(pins) != 1 || pins["127.0.0.1:7401"] != id.ID() {
		t.Fatalf("pins %v, %v; want 127.0.0.1:7401 -> %s", pins, err, id.ID())
	}
	if err := os.WriteFile(path, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPins(dir); err == nil {
		t.Fatal("a damaged file read without an error")
	}
}
