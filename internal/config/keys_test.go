package config

import (
	"crypto/ed25519"
	"encoding/hex"
	"strings"
	"testing"
)

func TestParseKeys(t *testing.T) {
	pub := ed25519.PublicKey(make([]byte, ed25519.PublicKeySize))
	pub[0] = 7
	good := hex.EncodeToString(pub)
	keys, err := ParseKeys("host.controllers", []string{good, strings.ToUpper(good)})
	if err != nil || len(keys) != 2 || !keys[0].Equal(pub) || !keys[1].Equal(pub) {
		t.Fatalf("ParseKeys = %v, %v", keys, err)
	}
	if keys, err := ParseKeys("host.controllers", nil); keys != nil || err != nil {
		t.Errorf("no keys: %v, %v; want nil, nil", keys, err)
	}
	for give, want := range map[string]string{
		good[:62]:       "host.controllers[1]: key must be 64 hex characters (an ed25519 public key), got 62 characters",
		good[:63] + "g": "host.controllers[1]: key must be 64 hex characters (an ed25519 public key), got a non-hex character",
		" " + good[1:]:  "host.controllers[1]: key must be 64 hex characters (an ed25519 public key), got a non-hex character",
	} {
		if _, err := ParseKeys("host.controllers", []string{good, give}); err == nil || err.Error() != want {
			t.Errorf("ParseKeys(%q) = %v, want %q", give, err, want)
		}
	}
}

// FuzzParseKey: a key either parses into 32 bytes that print back as the
// same text (case aside) or is refused; Validate's check agrees.
func FuzzParseKey(f *testing.F) {
	f.Add(strings.Repeat("ab", 32))
	f.Add(strings.Repeat("AB", 31) + "zz")
	f.Add("")
	f.Fuzz(func(t *testing.T, k string) {
		pub, err := ParseKey(k)
		if (err == nil) != (checkKey(k) == nil) {
			t.Fatalf("ParseKey and checkKey disagree on %q", k)
		}
		if err != nil {
			return
		}
		if len(pub) != ed25519.PublicKeySize || !strings.EqualFold(hex.EncodeToString(pub), k) {
			t.Fatalf("ParseKey(%q) = %x", k, pub)
		}
	})
}
