package config

import (
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
)

// ParseKey parses a public key as the config writes one: 64 hex
// characters, an ed25519 public key. Validate checks every key of the
// config with it, and the daemon maps them with it.
func ParseKey(k string) (ed25519.PublicKey, error) {
	if len(k) != 2*ed25519.PublicKeySize {
		return nil, fmt.Errorf("key must be 64 hex characters (an ed25519 public key), got %d characters", len(k))
	}
	b, err := hex.DecodeString(k)
	if err != nil {
		return nil, errors.New("key must be 64 hex characters (an ed25519 public key), got a non-hex character")
	}
	return ed25519.PublicKey(b), nil
}

// ParseKeys parses the keys a config key lists (ParseKey); an error names
// the entry ("host.controllers[1]: ..."). No keys give nil.
func ParseKeys(path string, keys []string) ([]ed25519.PublicKey, error) {
	var out []ed25519.PublicKey
	for i, k := range keys {
		pub, err := ParseKey(k)
		if err != nil {
			return nil, fmt.Errorf("%s[%s]: %w", path, strconv.Itoa(i), err)
		}
		out = append(out, pub)
	}
	return out, nil
}
