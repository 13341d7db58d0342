package mesh

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/identity"
)

// Trust tiers a peer may be given by the operator.
const (
	TierDiscovered = grammar.TierDiscovered
	TierPaired     = grammar.TierPaired
	TierPinned     = grammar.TierPinned
)

// PeerConfig is one configured peer.
type PeerConfig struct {
	// Name is an optional label allowlists may use instead of the id.
	Name string
	// Addr is the peer's mesh address, host:port (UDP).
	Addr string
	// Key is the peer's ed25519 public key as 64 hex characters; empty
	// pins the first key seen at Addr (trust on first use).
	Key string
	// Tier is discovered, paired or pinned; empty is allowed.
	Tier string
}

// Config is the mesh configuration.
type Config struct {
	// Listen is the UDP address the mesh binds for listening and dialing.
	Listen string
	// Keepalive is the keep-alive period; 0 means DefaultKeepalive. The
	// idle timeout is IdleTimeoutFactor times it. A change applies to new
	// links.
	Keepalive time.Duration
	// Peers are the configured peers: the only nodes ever admitted.
	Peers []PeerConfig
	// AdvertInterval is the advertisement period; 0 means
	// DefaultAdvertInterval.
	AdvertInterval time.Duration
	// LivenessTimeout is how long a link may hear no heartbeat before it
	// is closed as dead; 0 means DefaultLivenessTimeout. A change applies
	// to new links.
	LivenessTimeout time.Duration
	// MaxStreams is the most concurrent streams a peer may open on its
	// link (requests it forwards here, and the rest); below
	// MaxStreamsPerPeer (0 included) it is MaxStreamsPerPeer, at most
	// MaxStreamsLimit. The listener takes it at Run; a change applies to
	// links dialed after it.
	MaxStreams int
}

func (c Config) maxStreams() int64 {
	return int64(max(c.MaxStreams, MaxStreamsPerPeer))
}

func (c Config) livenessTimeout() time.Duration {
	if c.LivenessTimeout <= 0 {
		return DefaultLivenessTimeout
	}
	return c.LivenessTimeout
}

func (c Config) keepalive() time.Duration {
	if c.Keepalive <= 0 {
		return DefaultKeepalive
	}
	return c.Keepalive
}

func (c Config) advertInterval() time.Duration {
	if c.AdvertInterval <= 0 {
		return DefaultAdvertInterval
	}
	return c.AdvertInterval
}

// Validate reports every static problem of c at once. self, when not nil,
// is this node's public key: a peer may not carry it.
func (c Config) Validate(self ed25519.PublicKey) error {
	var errs []error
	if _, err := splitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("mesh.listen %q: %w", c.Listen, err))
	}
	if c.Keepalive < 0 {
		errs = append(errs, fmt.Errorf("mesh.keepalive %v is negative", c.Keepalive))
	}
	if c.LivenessTimeout != 0 && (c.LivenessTimeout < MinLivenessTimeout || c.LivenessTimeout > MaxLivenessTimeout) {
		errs = append(errs, fmt.Errorf("mesh.liveness_timeout %v is outside [%v, %v]", c.LivenessTimeout, MinLivenessTimeout, MaxLivenessTimeout))
	}
	if c.MaxStreams < 0 || c.MaxStreams > MaxStreamsLimit {
		errs = append(errs, fmt.Errorf("mesh max streams per peer %d: want 0..%d", c.MaxStreams, MaxStreamsLimit))
	}
	if c.AdvertInterval < 0 {
		errs = append(errs, fmt.Errorf("mesh advert interval %v is negative", c.AdvertInterval))
	}
	if len(c.Peers) > MaxPeers {
		errs = append(errs, fmt.Errorf("mesh.peers: %d peers, at most %d", len(c.Peers), MaxPeers))
		return errors.Join(errs...)
	}
	names := map[string]int{}
	addrs := map[string]int{}
	keys := map[string]int{}
	for i, p := range c.Peers {
		where := fmt.Sprintf("mesh.peers[%d]", i)
		if _, err := splitHostPort(p.Addr); err != nil {
			errs = append(errs, fmt.Errorf("%s.addr %q: %w", where, p.Addr, err))
		} else if j, dup := addrs[p.Addr]; dup {
			errs = append(errs, fmt.Errorf("%s.addr %q repeats mesh.peers[%d]", where, p.Addr, j))
		} else {
			addrs[p.Addr] = i
		}
		if p.Name != "" {
			if j, dup := names[p.Name]; dup {
				errs = append(errs, fmt.Errorf("%s.name %q repeats mesh.peers[%d]", where, p.Name, j))
			} else {
				names[p.Name] = i
			}
		}
		if p.Key != "" {
			k, err := identity.ParsePublicKeyHex(p.Key)
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("%s.key: %w", where, err))
			case self != nil && bytes.Equal(k, self):
				errs = append(errs, fmt.Errorf("%s.key is this node's own key", where))
			default:
				if j, dup := keys[string(k)]; dup {
					errs = append(errs, fmt.Errorf("%s.key repeats mesh.peers[%d]", where, j))
				} else {
					keys[string(k)] = i
				}
			}
		}
		if _, ok := grammar.TrustTierRank(p.Tier); !ok && p.Tier != "" {
			errs = append(errs, fmt.Errorf("%s.tier %q is not %s", where, p.Tier, grammar.TrustTierWords()))
		}
	}
	return errors.Join(errs...)
}

func splitHostPort(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return "", fmt.Errorf("bad port %q", port)
	}
	return host, nil
}
