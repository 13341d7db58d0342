package pkg

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rewriteManifest decodes dir's manifest, lets edit change it, and writes
// it signed by key without validation.
func rewriteManifest(t *testing.T, dir string, key []byte, edit func(m map[string]any)) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(readFile(t, filepath.Join(dir, ManifestFile)), &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	writeSigned(t, dir, data, key)
}

func TestVerifyDir(t *testing.T) {
	publisher := testKey(t)
	stranger := testKey(t)
	anchors := Anchors{pubOf(publisher)}

	tests := []struct {
		name     string
		mutate   func(t *testing.T, dir string)
		wantCode string
	}{
		{name: "signed package verifies", mutate: func(*testing.T, string) {}},
		{
			name:     "artifact grew",
			mutate:   func(t *testing.T, dir string) { appendFile(t, filepath.Join(dir, "data/model.bin"), "x") },
			wantCode: CodeFileSize,
		},
		{
			name: "artifact changed, same size",
			mutate: func(t *testing.T, dir string) {
				p := filepath.Join(dir, "data/model.bin")
				b := readFile(t, p)
				b[0] ^= 1
				if err := os.WriteFile(p, b, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			wantCode: CodeFileHash,
		},
		{
			name:     "listed file missing",
			mutate:   func(t *testing.T, dir string) { remove(t, filepath.Join(dir, "data/README.txt")) },
			wantCode: CodeFileMissing,
		},
		{
			name: "listed file is a directory",
			mutate: func(t *testing.T, dir string) {
				p := filepath.Join(dir, "data/README.txt")
				remove(t, p)
				if err := os.Mkdir(p, 0o755); err != nil {
					t.Fatal(err)
				}
			},
			wantCode: CodeFileMissing,
		},
		{
			name:     "unsigned",
			mutate:   func(t *testing.T, dir string) { remove(t, filepath.Join(dir, SignatureFile)) },
			wantCode: CodeBadSignature,
		},
		{
			name: "empty signature list",
			mutate: func(t *testing.T, dir string) {
				writeFile(t, filepath.Join(dir, SignatureFile), `{"signatures":[]}`)
			},
			wantCode: CodeBadSignature,
		},
		{
			name: "signed by a key that is not an anchor",
			mutate: func(t *testing.T, dir string) {
				writeSigned(t, dir, readFile(t, filepath.Join(dir, ManifestFile)), stranger)
			},
			wantCode: CodeUntrustedSigner,
		},
		{
			name: "manifest edited after signing",
			mutate: func(t *testing.T, dir string) {
				p := filepath.Join(dir, ManifestFile)
				b := bytes.Replace(readFile(t, p), []byte(`"1.0.0"`), []byte(`"1.0.1"`), 1)
				writeFile(t, p, string(b))
			},
			wantCode: CodeBadSignature,
		},
		{
			name: "whitespace added to the manifest after signing",
			mutate: func(t *testing.T, dir string) {
				appendFile(t, filepath.Join(dir, ManifestFile), " ")
			},
			wantCode: CodeBadSignature,
		},
		{
			name: "listed path with ..",
			mutate: func(t *testing.T, dir string) {
				rewriteManifest(t, dir, publisher, func(m map[string]any) {
					m["files"].([]any)[1].(map[string]any)["path"] = "../x"
				})
			},
			wantCode: CodePathEscape,
		},
		{
			name: "absolute listed path",
			mutate: func(t *testing.T, dir string) {
				rewriteManifest(t, dir, publisher, func(m map[string]any) {
					m["files"].([]any)[1].(map[string]any)["path"] = "/etc/passwd"
				})
			},
			wantCode: CodePathEscape,
		},
		{
			name: "listed file is a symlink pointing outside",
			mutate: func(t *testing.T, dir string) {
				p := filepath.Join(dir, "data/README.txt")
				outside := filepath.Join(t.TempDir(), "outside")
				writeFile(t, outside, "hello")
				remove(t, p)
				if err := os.Symlink(outside, p); err != nil {
					t.Fatal(err)
				}
			},
			wantCode: CodePathEscape,
		},
		{
			name: "listed file is a symlink inside the package",
			mutate: func(t *testing.T, dir string) {
				p := filepath.Join(dir, "data/README.txt")
				writeFile(t, filepath.Join(dir, "copy"), "hello")
				remove(t, p)
				if err := os.Symlink("../copy", p); err != nil {
					t.Fatal(err)
				}
			},
			wantCode: CodePathEscape,
		},
		{
			name: "directory on the path is a symlink pointing outside",
			mutate: func(t *testing.T, dir string) {
				outside := t.TempDir()
				writeFiles(t, outside, map[string]string{"model.bin": "weights weights weights", "README.txt": "hello"})
				if err := os.RemoveAll(filepath.Join(dir, "data")); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(outside, filepath.Join(dir, "data")); err != nil {
					t.Fatal(err)
				}
			},
			wantCode: CodePathEscape,
		},
		{
			name: "manifest is a symlink",
			mutate: func(t *testing.T, dir string) {
				p := filepath.Join(dir, ManifestFile)
				outside := filepath.Join(t.TempDir(), "m.json")
				writeFile(t, outside, string(readFile(t, p)))
				remove(t, p)
				if err := os.Symlink(outside, p); err != nil {
					t.Fatal(err)
				}
			},
			wantCode: CodePathEscape,
		},
		{
			name: "oversized manifest",
			mutate: func(t *testing.T, dir string) {
				p := filepath.Join(dir, ManifestFile)
				writeFile(t, p, string(readFile(t, p))+strings.Repeat(" ", MaxManifestBytes))
			},
			wantCode: CodeTooLarge,
		},
		{
			name: "oversized signature file",
			mutate: func(t *testing.T, dir string) {
				writeFile(t, filepath.Join(dir, SignatureFile), strings.Repeat(" ", MaxSigFileBytes+1))
			},
			wantCode: CodeTooLarge,
		},
		{
			name: "duplicate files",
			mutate: func(t *testing.T, dir string) {
				rewriteManifest(t, dir, publisher, func(m map[string]any) {
					files := m["files"].([]any)
					m["files"] = append(files, files[0])
				})
			},
			wantCode: CodeBadManifest,
		},
		{
			name: "signed garbage manifest",
			mutate: func(t *testing.T, dir string) {
				writeSigned(t, dir, []byte(`{"schema":1}`), publisher)
			},
			wantCode: CodeBadManifest,
		},
		{
			name: "unlisted extra file is ignored",
			mutate: func(t *testing.T, dir string) {
				writeFile(t, filepath.Join(dir, "extra"), "x")
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := makePackage(t, publisher)
			tt.mutate(t, dir)
			v, err := VerifyDir(dir, anchors, nil)
			if got := ErrorCode(err); got != tt.wantCode {
				t.Fatalf("code = %q, want %q (err %v)", got, tt.wantCode, err)
			}
			if tt.wantCode != "" {
				return
			}
			if !v.Signer.Equal(pubOf(publisher)) {
				t.Errorf("signer = %x, want the publisher", v.Signer)
			}
			if diff := cmp.Diff(ManifestHash(readFile(t, filepath.Join(dir, ManifestFile))), v.ManifestHash); diff != "" {
				t.Errorf("manifest hash (-want +got):\n%s", diff)
			}
			if got := len(v.Manifest.Files); got != 3 {
				t.Errorf("%d files, want 3", got)
			}
		})
	}
}

func TestVerifyDirRevoked(t *testing.T) {
	publisher := testKey(t)
	anchors := Anchors{pubOf(publisher)}
	dir := makePackage(t, publisher)
	v, err := VerifyDir(dir, anchors, nil)
	if err != nil {
		t.Fatal(err)
	}
	model, _ := v.Manifest.File("data/model.bin")

	tests := []struct {
		name    string
		subject Subject
	}{
		{"package id", Subject{Kind: SubjectPackage, Value: "echo"}},
		{"signer key", Subject{Kind: SubjectSigner, Value: hexOf(pubOf(publisher))}},
		{"manifest hash", Subject{Kind: SubjectArtifact, Value: v.ManifestHash}},
		{"file hash", Subject{Kind: SubjectArtifact, Value: model.SHA256}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rev, err := OpenRevocations(filepath.Join(t.TempDir(), RevocationsFile), nil)
			if err != nil {
				t.Fatal(err)
			}
			// An unrelated revocation changes nothing.
			if _, err := rev.Revoke(Subject{Kind: SubjectPackage, Value: "other", Reason: "x"}); err != nil {
				t.Fatal(err)
			}
			if _, err := VerifyDir(dir, anchors, rev); err != nil {
				t.Fatalf("before revoke: %v", err)
			}
			s := tt.subject
			s.Reason = "compromised"
			if _, err := rev.Revoke(s); err != nil {
				t.Fatal(err)
			}
			_, err = VerifyDir(dir, anchors, rev)
			ve, ok := errors.AsType[*VerifyError](err)
			if !ok || ve.Code != CodeRevoked {
				t.Fatalf("after revoke: err = %v, want code %q", err, CodeRevoked)
			}
			if ve.Subject == nil || ve.Subject.Kind != s.Kind || ve.Subject.Value != s.Value {
				t.Errorf("subject = %+v, want %s", ve.Subject, s)
			}
			if !strings.Contains(ve.Detail, "is revoked: compromised") {
				t.Errorf("detail %q does not give the reason", ve.Detail)
			}
			if changed, err := rev.Unrevoke(s.Kind, s.Value); err != nil || !changed {
				t.Fatalf("unrevoke = %v, %v", changed, err)
			}
			if _, err := VerifyDir(dir, anchors, rev); err != nil {
				t.Fatalf("after unrevoke: %v", err)
			}
		})
	}
}

func TestVerifyDirRevokedCoSigner(t *testing.T) {
	// A package signed by an anchor and by a revoked key is refused: every
	// key with a valid signature is a subject.
	publisher, other := testKey(t), testKey(t)
	dir := makePackage(t, publisher)
	if err := Sign(dir, other); err != nil {
		t.Fatal(err)
	}
	rev, err := OpenRevocations(filepath.Join(t.TempDir(), RevocationsFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rev.Revoke(Subject{Kind: SubjectSigner, Value: hexOf(pubOf(other))}); err != nil {
		t.Fatal(err)
	}
	_, err = VerifyDir(dir, Anchors{pubOf(publisher)}, rev)
	if got := ErrorCode(err); got != CodeRevoked {
		t.Fatalf("code = %q, want %q (err %v)", got, CodeRevoked, err)
	}
}

func TestSignKeepsValidSignatures(t *testing.T) {
	a, b := testKey(t), testKey(t)
	dir := makePackage(t, a)
	if err := Sign(dir, b); err != nil {
		t.Fatal(err)
	}
	if err := Sign(dir, a); err != nil { // re-sign replaces, never duplicates
		t.Fatal(err)
	}
	for _, k := range []ed25519.PrivateKey{a, b} {
		if _, err := VerifyDir(dir, Anchors{pubOf(k)}, nil); err != nil {
			t.Fatalf("anchor %x: %v", pubOf(k), err)
		}
	}
	sf, err := ParseSigFile(readFile(t, filepath.Join(dir, SignatureFile)))
	if err != nil {
		t.Fatal(err)
	}
	if len(sf.Signatures) != 2 {
		t.Fatalf("%d signatures, want 2", len(sf.Signatures))
	}
	// A rebuilt manifest invalidates b's signature; signing with a drops it.
	m := testManifest()
	m.Version = "2.0.0"
	if _, err := Build(dir, m); err != nil {
		t.Fatal(err)
	}
	if err := Sign(dir, a); err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyDir(dir, Anchors{pubOf(a)}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyDir(dir, Anchors{pubOf(b)}, nil); ErrorCode(err) != CodeUntrustedSigner {
		t.Fatalf("b's stale signature: err = %v, want %s", err, CodeUntrustedSigner)
	}
}

func TestKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "publisher.key")
	pub, err := GenerateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := GenerateKey(path); err == nil {
		t.Fatal("GenerateKey overwrote an existing key")
	}
	key, err := LoadSigningKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if !pubOf(key).Equal(pub) {
		t.Fatal("loaded key differs from the generated one")
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSigningKey(path); err == nil {
		t.Fatal("LoadSigningKey accepted a group-readable key")
	}
}

func TestVerifyManifestChecksBeforeParsing(t *testing.T) {
	// Bytes that do not parse, signed by a stranger, are refused for the
	// signer, not for their content.
	stranger := testKey(t)
	garbage := []byte("not json")
	sig := `{"signatures":[{"key":"` + hexOf(pubOf(stranger)) + `","sig":"` + hexOf(signManifest(stranger, garbage)) + `"}]}`
	_, _, err := VerifyManifest(garbage, []byte(sig), Anchors{pubOf(testKey(t))})
	if got := ErrorCode(err); got != CodeUntrustedSigner {
		t.Fatalf("code = %q, want %q", got, CodeUntrustedSigner)
	}
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func appendFile(t *testing.T, p, content string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
}

func remove(t *testing.T, p string) {
	t.Helper()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyBytes(t *testing.T) {
	publisher := testKey(t)
	dir := makePackage(t, publisher)
	manifest, sig := readFile(t, filepath.Join(dir, ManifestFile)), readFile(t, filepath.Join(dir, SignatureFile))
	rev, err := OpenRevocations(filepath.Join(t.TempDir(), RevocationsFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := VerifyBytes(manifest, sig, Anchors{pubOf(publisher)}, rev)
	if err != nil {
		t.Fatal(err)
	}
	if v.Dir != "" || v.ManifestHash != ManifestHash(manifest) || len(v.Signers) != 1 {
		t.Fatalf("verified = %+v", v)
	}
	if _, err := rev.Revoke(Subject{Kind: SubjectArtifact, Value: v.ManifestHash}); err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyBytes(manifest, sig, Anchors{pubOf(publisher)}, rev); ErrorCode(err) != CodeRevoked {
		t.Fatalf("after revoking the manifest hash: err = %v, want %s", err, CodeRevoked)
	}
}
