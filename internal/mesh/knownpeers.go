package mesh

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nodeld/nodeld/internal/atomicfile"
	"github.com/nodeld/nodeld/internal/identity"
)

// KnownPeersFile is the name of the trust-on-first-use pin file inside the
// data directory.
const KnownPeersFile = "known_peers.json"

const knownPeersVersion = 1

// knownPeer is one pin: the first key seen at a configured address.
type knownPeer struct {
	Addr     string    `json:"addr"`
	Key      string    `json:"key"`
	ID       string    `json:"id"`
	PinnedAt time.Time `json:"pinned_at"`
}

type knownPeersDoc struct {
	Version int         `json:"version"`
	Peers   []knownPeer `json:"peers"`
}

// loadKnownPeers reads the pins, addr -> key. A missing file is empty.
func loadKnownPeers(path string) (map[string]knownPeer, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]knownPeer{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open known peers: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxKnownPeersFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read known peers %s: %w", path, err)
	}
	if len(data) > MaxKnownPeersFileBytes {
		return nil, fmt.Errorf("known peers %s exceeds %d bytes", path, MaxKnownPeersFileBytes)
	}
	return decodeKnownPeers(data)
}

func decodeKnownPeers(data []byte) (map[string]knownPeer, error) {
	var doc knownPeersDoc
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("decode known peers: %w", err)
	}
	// writeKnownPeers writes one document; anything after it is damage,
	// not more pins.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("decode known peers: trailing data after the document")
	}
	if doc.Version != knownPeersVersion {
		return nil, fmt.Errorf("known peers version %d, want %d", doc.Version, knownPeersVersion)
	}
	out := make(map[string]knownPeer, len(doc.Peers))
	for _, p := range doc.Peers {
		k, err := identity.ParsePublicKeyHex(p.Key)
		if err != nil {
			return nil, fmt.Errorf("known peer %q: %w", p.Addr, err)
		}
		// One pin per address: two would leave which key the address
		// must show to whichever entry the decoder happened to keep.
		if _, dup := out[p.Addr]; dup {
			return nil, fmt.Errorf("known peer %q pinned twice", p.Addr)
		}
		p.Key = hex.EncodeToString(k)
		p.ID = identity.NodeID(k)
		out[p.Addr] = p
	}
	return out, nil
}

// writeKnownPeers replaces the pin file atomically: temp file, fsync,
// rename, directory fsync; mode 0600.
func writeKnownPeers(path string, pins map[string]knownPeer) error {
	data, err := encodeKnownPeers(pins)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, data, 0o600)
}

// encodeKnownPeers is the pin file's content: the pins sorted by address.
func encodeKnownPeers(pins map[string]knownPeer) ([]byte, error) {
	doc := knownPeersDoc{Version: knownPeersVersion, Peers: make([]knownPeer, 0, len(pins))}
	for _, p := range pins {
		doc.Peers = append(doc.Peers, p)
	}
	slices.SortFunc(doc.Peers, func(a, b knownPeer) int { return strings.Compare(a.Addr, b.Addr) })
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode known peers: %w", err)
	}
	return append(data, '\n'), nil
}

// ReadPins returns the node ids pinned on first contact in dataDir's
// known_peers.json, by peer address: what config check needs to resolve
// a node id that names a peer whose key the config does not give. A
// missing file has no pins; a damaged one is an error, as it is to New.
func ReadPins(dataDir string) (map[string]string, error) {
	pins, err := loadKnownPeers(filepath.Join(dataDir, KnownPeersFile))
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(pins))
	for addr, p := range pins {
		out[addr] = p.ID
	}
	return out, nil
}
