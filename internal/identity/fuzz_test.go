package identity

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fuzzKeyPEM is the key file Generate writes for a fixed seed.
func fuzzKeyPEM(tb testing.TB, seed byte) []byte {
	tb.Helper()
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemType, Bytes: der})
}

// FuzzLoad: the key file is read back at every start and another party
// may have written it (a restored backup, a copied data directory). Load
// never panics, refuses what is not one PKCS#8 ed25519 key with
// ErrCorruptKey, and a key it accepts is the key the file encodes: it
// writes back (PEM of PKCS#8) to a file that loads to the same identity.
func FuzzLoad(f *testing.F) {
	good := fuzzKeyPEM(f, 1)
	f.Add(good)
	f.Add(append(bytes.Clone(good), "\n\n  \t"...))
	f.Add(append(bytes.Clone(good), "x"...))
	f.Add(append(bytes.Clone(good), fuzzKeyPEM(f, 2)...))
	f.Add(bytes.Replace(good, []byte("PRIVATE KEY"), []byte("RSA PRIVATE KEY"), 2))
	f.Add([]byte("-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n"))
	f.Add([]byte("-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n"))
	f.Add([]byte(""))
	dir := f.TempDir()
	path := filepath.Join(dir, KeyFileName)
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		id, err := Load(path)
		if err != nil {
			if !errors.Is(err, ErrCorruptKey) {
				t.Fatalf("Load error %v does not wrap ErrCorruptKey", err)
			}
			return
		}
		if len(id.PrivateKey()) != ed25519.PrivateKeySize || !id.PublicKey().Equal(id.PrivateKey().Public()) || id.ID() != NodeID(id.PublicKey()) {
			t.Fatalf("inconsistent identity %s", id.ID())
		}
		der, err := x509.MarshalPKCS8PrivateKey(id.PrivateKey())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: pemType, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		again, err := Load(path)
		if err != nil || !again.PrivateKey().Equal(id.PrivateKey()) {
			t.Fatalf("re-encoded key: %v", err)
		}
	})
}

// FuzzParsePublicKeyHex: peer keys come from config files, the known-peers
// file and operators' pastes. What parses is 32 bytes whose lower-case hex
// parses again to the same key.
func FuzzParsePublicKeyHex(f *testing.F) {
	f.Add(strings.Repeat("ab", 32))
	f.Add(" " + strings.Repeat("AB", 32) + "\n")
	f.Add(strings.Repeat("ab", 31))
	f.Add(strings.Repeat("zz", 32))
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParsePublicKeyHex(s)
		if err != nil {
			if k != nil {
				t.Fatal("key returned with an error")
			}
			return
		}
		if len(k) != ed25519.PublicKeySize {
			t.Fatalf("key of %d bytes", len(k))
		}
		again, err := ParsePublicKeyHex(hex.EncodeToString(k))
		if err != nil || !again.Equal(k) {
			t.Fatalf("round trip: %x, %v", again, err)
		}
	})
}
