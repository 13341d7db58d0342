package pkg

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nodeld/nodeld/internal/atomicfile"
	"github.com/nodeld/nodeld/internal/identity"
)

// manifestDomain prefixes the manifest bytes under every package
// signature, so a package signature can never be replayed as any other
// signed message of nodeld, nor one of those as a package signature.
const manifestDomain = "nodeld.pkg.manifest.v1\x00"

// Anchors are the publisher keys a node trusts to sign packages
// (host.trust_anchors).
type Anchors []ed25519.PublicKey

// ParseAnchors decodes hex public keys, as written in the config.
func ParseAnchors(hexKeys []string) (Anchors, error) {
	out := make(Anchors, 0, len(hexKeys))
	for i, h := range hexKeys {
		k, err := identity.ParsePublicKeyHex(h)
		if err != nil {
			return nil, fmt.Errorf("trust anchor %d: %w", i, err)
		}
		out = append(out, k)
	}
	return out, nil
}

// Contains reports whether key is one of the anchors.
func (a Anchors) Contains(key ed25519.PublicKey) bool {
	for _, k := range a {
		if k.Equal(key) {
			return true
		}
	}
	return false
}

// SigFile is the content of manifest.sig.
type SigFile struct {
	Signatures []Signature `json:"signatures"`
}

// Signature is one publisher's signature over the manifest.
type Signature struct {
	// Key is the publisher's ed25519 public key, 64 lower-case hex.
	Key string `json:"key"`
	// Sig is the ed25519 signature over manifestDomain followed by the
	// exact manifest.json bytes, 128 lower-case hex.
	Sig string `json:"sig"`
}

// ParseSigFile decodes manifest.sig strictly and bounded. It checks the
// shape of keys and signatures, not that they verify.
func ParseSigFile(data []byte) (*SigFile, error) {
	if len(data) > MaxSigFileBytes {
		return nil, verr(CodeTooLarge, "signature file has %d bytes, limit %d", len(data), MaxSigFileBytes)
	}
	var sf SigFile
	if err := decodeStrict(data, &sf); err != nil {
		return nil, &VerifyError{Code: CodeBadSignature, Detail: "decode signature file: " + err.Error(), Err: err}
	}
	if len(sf.Signatures) == 0 {
		return nil, verr(CodeBadSignature, "signature file holds no signature")
	}
	if len(sf.Signatures) > MaxSignatures {
		return nil, verr(CodeTooLarge, "signature file holds %d signatures, limit %d", len(sf.Signatures), MaxSignatures)
	}
	seen := map[string]bool{}
	for i, s := range sf.Signatures {
		if !validHex(s.Key, ed25519.PublicKeySize) || !validHex(s.Sig, ed25519.SignatureSize) {
			return nil, verr(CodeBadSignature, "signature %d: key or sig is not lower-case hex of the right length", i)
		}
		if seen[s.Key] {
			return nil, verr(CodeBadSignature, "signature %d: key %s signs twice", i, s.Key)
		}
		seen[s.Key] = true
	}
	return &sf, nil
}

// signManifest returns key's signature over manifest bytes.
func signManifest(key ed25519.PrivateKey, manifestBytes []byte) []byte {
	return ed25519.Sign(key, domainMessage(manifestDomain, manifestBytes))
}

func domainMessage(domain string, data []byte) []byte {
	msg := make([]byte, 0, len(domain)+len(data))
	msg = append(msg, domain...)
	return append(msg, data...)
}

// verifiedSigners returns the keys of every signature in sf that verifies
// over manifestBytes, in file order.
func verifiedSigners(sf *SigFile, manifestBytes []byte) []ed25519.PublicKey {
	msg := domainMessage(manifestDomain, manifestBytes)
	var out []ed25519.PublicKey
	for _, s := range sf.Signatures {
		key, _ := hex.DecodeString(s.Key) // shape checked by ParseSigFile
		sig, _ := hex.DecodeString(s.Sig)
		if ed25519.Verify(ed25519.PublicKey(key), msg, sig) {
			out = append(out, ed25519.PublicKey(key))
		}
	}
	return out
}

// VerifyManifest checks that manifestBytes are signed by one of anchors,
// then parses them. It returns the manifest and the first anchor (in
// signature file order) whose signature verifies. The signature is checked
// over the bytes as received, before they are parsed.
//
// Codes: CodeTooLarge, CodeBadSignature (no or malformed signature file, or
// an anchor's signature that does not verify: the manifest was changed
// after signing), CodeUntrustedSigner (only keys that are not anchors
// signed), CodeBadManifest.
func VerifyManifest(manifestBytes, sigBytes []byte, anchors Anchors) (*Manifest, ed25519.PublicKey, error) {
	m, signers, err := verifyManifest(manifestBytes, sigBytes, anchors)
	if err != nil {
		return nil, nil, err
	}
	return m, signers.anchor, nil
}

// signerSet is what verifyManifest learnt from the signature file.
type signerSet struct {
	anchor ed25519.PublicKey   // first valid anchor signature
	all    []ed25519.PublicKey // every key whose signature verifies
}

func verifyManifest(manifestBytes, sigBytes []byte, anchors Anchors) (*Manifest, signerSet, error) {
	if len(manifestBytes) > MaxManifestBytes {
		return nil, signerSet{}, verr(CodeTooLarge, "manifest has %d bytes, limit %d", len(manifestBytes), MaxManifestBytes)
	}
	if len(sigBytes) == 0 {
		return nil, signerSet{}, verr(CodeBadSignature, "package is not signed")
	}
	sf, err := ParseSigFile(sigBytes)
	if err != nil {
		return nil, signerSet{}, err
	}
	valid := verifiedSigners(sf, manifestBytes)
	var set signerSet
	set.all = valid
	for _, k := range valid {
		if anchors.Contains(k) {
			set.anchor = k
			break
		}
	}
	if set.anchor == nil {
		for _, s := range sf.Signatures {
			key, _ := hex.DecodeString(s.Key)
			if anchors.Contains(ed25519.PublicKey(key)) {
				return nil, signerSet{}, verr(CodeBadSignature, "signature by trust anchor %s does not verify: the manifest changed after signing", s.Key)
			}
		}
		return nil, signerSet{}, verr(CodeUntrustedSigner, "no signature is by a trust anchor (%d signatures, %d anchors)", len(sf.Signatures), len(anchors))
	}
	m, err := ParseManifest(manifestBytes)
	if err != nil {
		return nil, signerSet{}, err
	}
	return m, set, nil
}

// GenerateKey makes a publisher signing key at path: PKCS#8 PEM, mode
// 0600, like the node key. It never overwrites an existing file
// (identity.ErrKeyExists).
func GenerateKey(path string) (ed25519.PublicKey, error) {
	id, err := identity.Generate(path)
	if err != nil {
		return nil, err
	}
	return id.PublicKey(), nil
}

// LoadSigningKey reads a publisher signing key written by GenerateKey. It
// refuses a file readable or writable by group or others
// (identity.ErrInsecurePermissions).
func LoadSigningKey(path string) (ed25519.PrivateKey, error) {
	id, err := identity.Load(path)
	if err != nil {
		return nil, err
	}
	return id.PrivateKey(), nil
}

// Sign signs dir/manifest.json as it is on disk and writes dir/manifest.sig
// atomically. The manifest must be valid. Signatures by other keys that
// still verify over the manifest are kept; those that no longer do (the
// manifest changed) are dropped; key's own signature is replaced. Sign
// does not check the files: run UpdateFiles first, or VerifyDir after.
func Sign(dir string, key ed25519.PrivateKey) error {
	if len(key) != ed25519.PrivateKeySize {
		return fmt.Errorf("sign package %q: ed25519 private key has %d bytes", dir, len(key))
	}
	manifestBytes, err := readBounded(filepath.Join(dir, ManifestFile), MaxManifestBytes)
	if err != nil {
		return fmt.Errorf("sign package %q: %w", dir, err)
	}
	if _, err := ParseManifest(manifestBytes); err != nil {
		return fmt.Errorf("sign package %q: %w", dir, err)
	}
	pub := key.Public().(ed25519.PublicKey)
	pubHex := hex.EncodeToString(pub)
	var keep []Signature
	sigPath := filepath.Join(dir, SignatureFile)
	old, err := readBounded(sigPath, MaxSigFileBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("sign package %q: %w", dir, err)
	default:
		sf, err := ParseSigFile(old)
		if err != nil {
			return fmt.Errorf("sign package %q: existing %s: %w", dir, SignatureFile, err)
		}
		msg := domainMessage(manifestDomain, manifestBytes)
		for _, s := range sf.Signatures {
			if s.Key == pubHex {
				continue
			}
			k, _ := hex.DecodeString(s.Key)
			sig, _ := hex.DecodeString(s.Sig)
			if ed25519.Verify(ed25519.PublicKey(k), msg, sig) {
				keep = append(keep, s)
			}
		}
	}
	if len(keep) >= MaxSignatures {
		return fmt.Errorf("sign package %q: already %d signatures, limit %d", dir, len(keep), MaxSignatures)
	}
	keep = append(keep, Signature{Key: pubHex, Sig: hex.EncodeToString(signManifest(key, manifestBytes))})
	data, err := json.MarshalIndent(SigFile{Signatures: keep}, "", "  ")
	if err != nil {
		return fmt.Errorf("sign package %q: %w", dir, err)
	}
	data = append(data, '\n')
	if err := atomicfile.WriteFile(sigPath, data, 0o644); err != nil {
		return fmt.Errorf("sign package %q: %w", dir, err)
	}
	return nil
}

// readBounded reads a regular file of at most limit bytes. A larger file
// gives a *VerifyError with CodeTooLarge.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readOpenBounded(f, path, limit)
}

func readOpenBounded(f *os.File, name string, limit int64) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", name)
	}
	if st.Size() > limit {
		return nil, verr(CodeTooLarge, "%s has %d bytes, limit %d", name, st.Size(), limit)
	}
	var buf bytes.Buffer
	buf.Grow(int(st.Size()))
	n, err := buf.ReadFrom(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if n > limit {
		return nil, verr(CodeTooLarge, "%s grew past %d bytes", name, limit)
	}
	return buf.Bytes(), nil
}
