package config

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
)

// PeerByRef returns the configured peer that ref names, as written in
// serve_to and use_from. A ref is matched, in order:
//
//  1. against peer names, exactly;
//  2. if it has the node id form ("n-" and 16 lower-case hex characters),
//     against the ids of the peers that have a configured key. The id is
//     derived from the key as DESIGN.md "Identity and trust" defines it
//     (the first 16 hex characters of SHA-256 of the 32 key bytes),
//     which identity.NodeID must agree with.
//
// A peer without a key (pinned on first contact) has no id until it
// connects, so a ref to it must use its name; resolving the id of such a
// peer at runtime is the caller's job. Peer names may not have the id
// form, so the two kinds of ref never clash.
func (c *Config) PeerByRef(ref string) (Peer, bool) {
	i, ok := c.peerIndex(ref)
	if !ok {
		return Peer{}, false
	}
	return c.Mesh.Peers[i], true
}

func (c *Config) peerIndex(ref string) (int, bool) {
	if ref == "" {
		return 0, false
	}
	if i := slices.IndexFunc(c.Mesh.Peers, func(p Peer) bool { return p.Name == ref }); i >= 0 {
		return i, true
	}
	if !isNodeIDRef(ref) {
		return 0, false
	}
	i := slices.IndexFunc(c.Mesh.Peers, func(p Peer) bool { return keyNodeID(p.Key) == ref })
	return i, i >= 0
}

// peerRefIndex resolves refs as PeerByRef does, in constant time per ref,
// for validating long lists against many peers.
type peerRefIndex struct {
	byName map[string]int
	byID   map[string]int
}

func newPeerRefIndex(peers []Peer) peerRefIndex {
	x := peerRefIndex{byName: make(map[string]int, len(peers)), byID: make(map[string]int, len(peers))}
	for i, p := range peers {
		if _, dup := x.byName[p.Name]; p.Name != "" && !dup {
			x.byName[p.Name] = i
		}
		if id := keyNodeID(p.Key); id != "" {
			if _, dup := x.byID[id]; !dup {
				x.byID[id] = i
			}
		}
	}
	return x
}

func (x peerRefIndex) lookup(ref string) (int, bool) {
	if i, ok := x.byName[ref]; ok {
		return i, true
	}
	if !isNodeIDRef(ref) {
		return 0, false
	}
	i, ok := x.byID[ref]
	return i, ok
}

// nodeIDLen is len("n-") plus 16 hex characters.
const nodeIDLen = 2 + 16

// isNodeIDRef reports whether s has the node id form.
func isNodeIDRef(s string) bool {
	if len(s) != nodeIDLen || !strings.HasPrefix(s, "n-") {
		return false
	}
	for i := 2; i < len(s); i++ {
		b := s[i]
		if !(b >= '0' && b <= '9' || b >= 'a' && b <= 'f') {
			return false
		}
	}
	return true
}

// keyNodeID derives the node id of a hex public key, "" if the key is
// not 64 hex characters.
func keyNodeID(keyHex string) string {
	if len(keyHex) != 64 {
		return ""
	}
	key, err := hex.DecodeString(keyHex)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(key)
	return "n-" + hex.EncodeToString(sum[:8])
}

// VoterIDs returns the node ids of the controllers replicated together
// (this node, selfID, and controller.voters), sorted: every voter derives
// the same list from its own file. A voter without a pinned key (refused
// by Validate) is left out.
func VoterIDs(c *Config, selfID string) []string {
	ids := []string{selfID}
	for _, name := range c.Controller.Voters {
		if p, ok := c.PeerByRef(name); ok {
			if id := keyNodeID(p.Key); id != "" && !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	slices.Sort(ids)
	return ids
}
