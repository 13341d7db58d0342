package identity

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nodeld/nodeld/internal/atomicfile"
)

// KeyFileName is the key's file name inside the data directory.
const KeyFileName = "node.key"

// maxKeyFileBytes bounds what Load reads: a PKCS#8 ed25519 PEM is about
// 120 bytes, so anything near this is not a key.
const maxKeyFileBytes = 16 << 10

// pemType is the PEM block type of a PKCS#8 private key.
const pemType = "PRIVATE KEY"

var (
	// ErrKeyExists is returned by Generate when the key file is present.
	ErrKeyExists = errors.New("key file already exists")
	// ErrKeyNotFound is returned by Load when there is no key file.
	ErrKeyNotFound = errors.New("key file not found")
	// ErrInsecurePermissions is returned when the key file is accessible
	// by group or others.
	ErrInsecurePermissions = errors.New("key file is accessible by group or others")
	// ErrCorruptKey is returned when the key file does not hold a PKCS#8
	// ed25519 private key.
	ErrCorruptKey = errors.New("key file is not a PKCS#8 PEM ed25519 private key")
)

// Identity is a node's key and the names derived from it.
type Identity struct {
	key ed25519.PrivateKey
	pub ed25519.PublicKey
	id  string
}

// New wraps an existing private key.
func New(key ed25519.PrivateKey) (*Identity, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("ed25519 private key has %d bytes, want %d", len(key), ed25519.PrivateKeySize)
	}
	pub := key.Public().(ed25519.PublicKey)
	return &Identity{key: key, pub: pub, id: NodeID(pub)}, nil
}

// NodeID derives a node id from a public key: "n-" and the first 16
// lower-case hex characters of SHA-256 of the key.
func NodeID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return "n-" + hex.EncodeToString(sum[:8])
}

// ParsePublicKeyHex decodes a 64-character hex ed25519 public key.
func ParsePublicKeyHex(s string) (ed25519.PublicKey, error) {
	b, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("public key is not hex: %w", err)
	}
	if len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("public key has %d bytes, want %d", len(b), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), nil
}

// ID returns the node id.
func (i *Identity) ID() string { return i.id }

// PublicKey returns the public key.
func (i *Identity) PublicKey() ed25519.PublicKey { return i.pub }

// PublicKeyHex returns the public key as 64 lower-case hex characters,
// the form operators paste into a peer's config.
func (i *Identity) PublicKeyHex() string { return hex.EncodeToString(i.pub) }

// PrivateKey returns the private key, for signing.
func (i *Identity) PrivateKey() ed25519.PrivateKey { return i.key }

// KeyPath returns the key file path inside dataDir.
func KeyPath(dataDir string) string { return filepath.Join(dataDir, KeyFileName) }

// Load reads the key file at path. It refuses a file accessible by group
// or others (ErrInsecurePermissions) and a file that is not a PKCS#8 PEM
// ed25519 key (ErrCorruptKey).
func Load(path string) (*Identity, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("load key %q: %w", path, ErrKeyNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("load key %q: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("load key %q: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("load key %q: not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("load key %q: mode %04o: %w (chmod 600 it)", path, perm, ErrInsecurePermissions)
	}
	if st.Size() > maxKeyFileBytes {
		return nil, fmt.Errorf("load key %q: %d bytes: %w", path, st.Size(), ErrCorruptKey)
	}
	data := make([]byte, st.Size())
	if _, err := f.ReadAt(data, 0); err != nil && st.Size() > 0 {
		return nil, fmt.Errorf("load key %q: %w", path, err)
	}
	key, err := parsePEM(data)
	if err != nil {
		return nil, fmt.Errorf("load key %q: %w", path, err)
	}
	return New(key)
}

func parsePEM(data []byte) (ed25519.PrivateKey, error) {
	block, rest := pem.Decode(data)
	if block == nil || block.Type != pemType {
		return nil, ErrCorruptKey
	}
	if len(strings.TrimSpace(string(rest))) != 0 {
		return nil, fmt.Errorf("trailing data after the key: %w", ErrCorruptKey)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorruptKey, err)
	}
	key, ok := parsed.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("key is %T, not ed25519: %w", parsed, ErrCorruptKey)
	}
	return key, nil
}

// Generate makes a new key and writes it to path with mode 0600, creating
// the parent directory (0700) when absent. It never overwrites: an
// existing file gives ErrKeyExists. The write is crash-safe: a temp file
// is written, fsynced and linked into place, and the directory fsynced.
func Generate(path string) (*Identity, error) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	data := pem.EncodeToMemory(&pem.Block{Type: pemType, Bytes: der})
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create key directory %q: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, ".node.key.tmp-*")
	if err != nil {
		return nil, fmt.Errorf("write key %q: %w", path, err)
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName)
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("write key %q: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("write key %q: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("write key %q: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("write key %q: %w", path, err)
	}
	// Link, not rename: link fails when the target exists, so a key that
	// appeared meanwhile is never replaced.
	if err := os.Link(tmpName, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("generate key %q: %w", path, ErrKeyExists)
		}
		return nil, fmt.Errorf("write key %q: %w", path, err)
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		return nil, fmt.Errorf("write key %q: %w", path, err)
	}
	return New(key)
}

// LoadOrGenerate loads the key at path, generating it when absent. The
// bool reports whether a new key was made.
func LoadOrGenerate(path string) (*Identity, bool, error) {
	id, err := Load(path)
	if err == nil {
		return id, false, nil
	}
	if !errors.Is(err, ErrKeyNotFound) {
		return nil, false, err
	}
	id, err = Generate(path)
	if errors.Is(err, ErrKeyExists) {
		// Another process made it between our Load and Generate.
		id, err = Load(path)
		return id, false, err
	}
	return id, err == nil, err
}

// certValidity is how long the self-signed mesh certificate claims to be
// valid. Peers authenticate the key, not the validity window, so it is
// long; it is re-made at every start anyway.
const certValidity = 10 * 365 * 24 * time.Hour

// TLSCertificate makes a self-signed X.509 certificate from the node key
// for the mesh. The subject common name is the node id; peers derive the
// id from the certificate's key, never from its names.
func (i *Identity) TLSCertificate(now time.Time) (tls.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("certificate serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: i.id},
		DNSNames:              []string{i.id},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, i.pub, i.key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("create certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("parse certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: i.key, Leaf: leaf}, nil
}

// PeerKey returns the ed25519 public key of a peer's certificate chain as
// presented in a TLS handshake. It is what the mesh admits or refuses.
func PeerKey(rawCerts [][]byte) (ed25519.PublicKey, error) {
	if len(rawCerts) == 0 {
		return nil, errors.New("peer presented no certificate")
	}
	cert, err := x509.ParseCertificate(rawCerts[0])
	if err != nil {
		return nil, fmt.Errorf("parse peer certificate: %w", err)
	}
	pub, ok := cert.PublicKey.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("peer certificate key is %T, not ed25519", cert.PublicKey)
	}
	if err := cert.CheckSignature(cert.SignatureAlgorithm, cert.RawTBSCertificate, cert.Signature); err != nil {
		return nil, fmt.Errorf("peer certificate is not self-signed by its key: %w", err)
	}
	return pub, nil
}
