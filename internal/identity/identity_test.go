package identity

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestGenerateLoadRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", KeyFileName)
	gen, err := Generate(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != 0o600 {
		t.Fatalf("key mode = %04o, want 0600", got)
	}
	loaded, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.ID() != gen.ID() || loaded.PublicKeyHex() != gen.PublicKeyHex() {
		t.Fatalf("loaded %s/%s, generated %s/%s", loaded.ID(), loaded.PublicKeyHex(), gen.ID(), gen.PublicKeyHex())
	}
	data, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(data), "-----BEGIN PRIVATE KEY-----") {
		t.Fatalf("key file is not PKCS#8 PEM: %q", data[:30])
	}
}

func TestGenerateNeverOverwrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), KeyFileName)
	first, err := Generate(path)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	if _, err := Generate(path); !errors.Is(err, ErrKeyExists) {
		t.Fatalf("second Generate error = %v, want ErrKeyExists", err)
	}
	after, _ := os.ReadFile(path)
	if string(before) != string(after) {
		t.Fatal("key file changed")
	}
	again, created, err := LoadOrGenerate(path)
	if err != nil || created || again.ID() != first.ID() {
		t.Fatalf("LoadOrGenerate = %v, %v, %v; want the existing key", again, created, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want only the key (temp files left?)", len(entries))
	}
}

func TestLoadOrGenerateConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), KeyFileName)
	var wg sync.WaitGroup
	ids := make([]string, 8)
	errs := make([]error, 8)
	for i := range ids {
		wg.Go(func() {
			id, _, err := LoadOrGenerate(path)
			errs[i] = err
			if err == nil {
				ids[i] = id.ID()
			}
		})
	}
	wg.Wait()
	for i := range ids {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Fatalf("callers disagree on the key: %s vs %s", ids[i], ids[0])
		}
	}
}

func TestLoadRefusals(t *testing.T) {
	good := filepath.Join(t.TempDir(), KeyFileName)
	if _, err := Generate(good); err != nil {
		t.Fatal(err)
	}
	goodPEM, _ := os.ReadFile(good)
	tests := []struct {
		name string
		data string
		mode os.FileMode
		want error
	}{
		{"group readable", string(goodPEM), 0o640, ErrInsecurePermissions},
		{"world readable", string(goodPEM), 0o604, ErrInsecurePermissions},
		{"group writable", string(goodPEM), 0o620, ErrInsecurePermissions},
		{"empty", "", 0o600, ErrCorruptKey},
		{"garbage", "not a key\n", 0o600, ErrCorruptKey},
		{"wrong pem type", strings.Replace(string(goodPEM), "PRIVATE KEY", "PUBLIC KEY", 2), 0o600, ErrCorruptKey},
		{"truncated body", string(goodPEM[:40]) + "\n-----END PRIVATE KEY-----\n", 0o600, ErrCorruptKey},
		{"trailing junk", string(goodPEM) + "junk", 0o600, ErrCorruptKey},
		{"flipped der", flipDER(t, goodPEM), 0o600, ErrCorruptKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), KeyFileName)
			if err := os.WriteFile(path, []byte(tt.data), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tt.mode); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Load error = %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not name the file", err)
			}
		})
	}
	if _, err := Load(filepath.Join(t.TempDir(), "absent")); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("absent key: %v, want ErrKeyNotFound", err)
	}
}

// flipDER changes one byte inside the base64 body so the DER no longer
// parses as PKCS#8.
func flipDER(t *testing.T, pemData []byte) string {
	t.Helper()
	lines := strings.Split(string(pemData), "\n")
	body := []byte(lines[1])
	body[2] = 'A'
	if body[2] == lines[1][2] {
		body[2] = 'B'
	}
	body[3], body[4] = 'z', 'z'
	lines[1] = string(body)
	return strings.Join(lines, "\n")
}

func TestNodeID(t *testing.T) {
	pub := make(ed25519.PublicKey, ed25519.PublicKeySize)
	for i := range pub {
		pub[i] = byte(i)
	}
	sum := sha256.Sum256(pub)
	want := "n-" + hex.EncodeToString(sum[:])[:16]
	if got := NodeID(pub); got != want {
		t.Fatalf("NodeID = %s, want %s", got, want)
	}
	if len(want) != 18 {
		t.Fatalf("node id length %d, want 18", len(want))
	}
}

func TestParsePublicKeyHex(t *testing.T) {
	id := mustIdentity(t)
	got, err := ParsePublicKeyHex(id.PublicKeyHex())
	if err != nil || !got.Equal(id.PublicKey()) {
		t.Fatalf("round trip: %v, %v", got, err)
	}
	for _, bad := range []string{"", "zz", strings.Repeat("ab", 31), strings.Repeat("ab", 33)} {
		if _, err := ParsePublicKeyHex(bad); err == nil {
			t.Errorf("ParsePublicKeyHex(%q) accepted", bad)
		}
	}
}

func TestTLSCertificateCarriesKey(t *testing.T) {
	id := mustIdentity(t)
	cert, err := id.TLSCertificate(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := PeerKey(cert.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	if !pub.Equal(id.PublicKey()) {
		t.Fatal("certificate key differs from the node key")
	}
	if cert.Leaf.Subject.CommonName != id.ID() {
		t.Fatalf("CN = %q, want %q", cert.Leaf.Subject.CommonName, id.ID())
	}
	// A certificate signed by another key than the one it carries is refused.
	other := mustIdentity(t)
	forged, err := other.TLSCertificate(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tampered := append([]byte(nil), forged.Certificate[0]...)
	tampered[len(tampered)-5] ^= 0xff // corrupt the signature
	if _, err := PeerKey([][]byte{tampered}); err == nil {
		t.Fatal("PeerKey accepted a certificate with a bad self-signature")
	}
	if _, err := PeerKey(nil); err == nil {
		t.Fatal("PeerKey accepted no certificate")
	}
}

func mustIdentity(t *testing.T) *Identity {
	t.Helper()
	id, err := Generate(filepath.Join(t.TempDir(), KeyFileName))
	if err != nil {
		t.Fatal(err)
	}
	return id
}
