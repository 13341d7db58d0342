package pkg

import (
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// makeVersion builds and signs package id at version in a fresh
// directory, with content making it distinct.
func makeVersion(t testing.TB, key ed25519.PrivateKey, id, version, content string) string {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"bin/serve": "#!/bin/sh\necho " + content + "\n", "data/model.bin": content})
	m := testManifest()
	m.ID, m.Version = id, version
	if _, err := Build(dir, m); err != nil {
		t.Fatal(err)
	}
	if err := Sign(dir, key); err != nil {
		t.Fatal(err)
	}
	return dir
}

func storeEntries(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestStoreAddCopiesVerifiedPackage(t *testing.T) {
	key := testKey(t)
	src := makeVersion(t, key, "echo", "1.0.0", "one")
	// An unlisted file is not copied.
	writeFiles(t, src, map[string]string{"notes.txt": "not listed"})
	root := filepath.Join(t.TempDir(), StoreDir)
	s := NewStore(root, nil)
	v, added, err := s.Add(src, Anchors{pubOf(key)})
	if err != nil || !added {
		t.Fatalf("Add: %v, added %v", err, added)
	}
	want := filepath.Join(root, "echo", "1.0.0")
	if v.Dir != want {
		t.Fatalf("Dir %s, want %s", v.Dir, want)
	}
	if _, err := VerifyDir(want, Anchors{pubOf(key)}, nil); err != nil {
		t.Fatalf("stored copy does not verify: %v", err)
	}
	if _, err := os.Stat(filepath.Join(want, "notes.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("unlisted file copied: %v", err)
	}
	fi, err := os.Stat(filepath.Join(want, "bin", "serve"))
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("bin/serve: %v, mode %v", err, fi.Mode())
	}
	for _, e := range storeEntries(t, root) {
		if strings.Contains(e, ".add-") {
			t.Errorf("temporary directory left: %s", e)
		}
	}
	// Adding it again changes nothing.
	v2, added, err := s.Add(src, Anchors{pubOf(key)})
	if err != nil || added || v2.Dir != want {
		t.Fatalf("second Add: %v, added %v, dir %s", err, added, v2.Dir)
	}
}

func TestStoreRefusesAndChangesNothing(t *testing.T) {
	key, other := testKey(t), testKey(t)
	root := filepath.Join(t.TempDir(), StoreDir)
	revPath := filepath.Join(t.TempDir(), RevocationsFile)
	rev, err := OpenRevocations(revPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rev.Revoke(Subject{Kind: SubjectPackage, Value: "bad", Reason: "compromised"}); err != nil {
		t.Fatal(err)
	}
	s := NewStore(root, rev)
	if _, _, err := s.Add(makeVersion(t, key, "echo", "1.0.0", "one"), Anchors{pubOf(key)}); err != nil {
		t.Fatal(err)
	}
	before := storeEntries(t, root)

	tampered := makeVersion(t, key, "echo", "1.1.0", "two")
	if err := os.WriteFile(filepath.Join(tampered, "data", "model.bin"), []byte("owt"), 0o644); err != nil {
		t.Fatal(err)
	}
	linked := makeVersion(t, key, "echo", "1.2.0", "three")
	if err := os.Remove(filepath.Join(linked, "data", "model.bin")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(linked, "data", "model.bin")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, dir string
		anchors   Anchors
		code      string
		is        error
	}{
		{"untrusted signer", makeVersion(t, other, "echo", "1.3.0", "x"), Anchors{pubOf(key)}, CodeUntrustedSigner, nil},
		{"file changed", tampered, Anchors{pubOf(key)}, CodeFileHash, nil},
		{"symbolic link", linked, Anchors{pubOf(key)}, CodePathEscape, nil},
		{"revoked", makeVersion(t, key, "bad", "1.0.0", "x"), Anchors{pubOf(key)}, CodeRevoked, nil},
		{"another package under the same version", makeVersion(t, key, "echo", "1.0.0", "changed"), Anchors{pubOf(key)}, "", ErrStoreConflict},
		{"unsigned", t.TempDir(), Anchors{pubOf(key)}, CodeBadManifest, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, added, err := s.Add(tt.dir, tt.anchors)
			if err == nil || added {
				t.Fatalf("added: %v", err)
			}
			if tt.code != "" && ErrorCode(err) != tt.code {
				t.Errorf("code %q (%v), want %q", ErrorCode(err), err, tt.code)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v is not %v", err, tt.is)
			}
			if after := storeEntries(t, root); !slices.Equal(after, before) {
				t.Errorf("store changed:\n%v\n%v", before, after)
			}
		})
	}
}

func TestStoreResolve(t *testing.T) {
	key := testKey(t)
	root := filepath.Join(t.TempDir(), StoreDir)
	s := NewStore(root, nil)
	for _, v := range []string{"1.2.0", "1.10.0", "1.9.0", "2.0.0-rc.1", "V3"} {
		if _, _, err := s.Add(makeVersion(t, key, "echo", v, v), Anchors{pubOf(key)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range []string{"0.1.0-alpha", "0.1.0-beta"} {
		if _, _, err := s.Add(makeVersion(t, key, "pre", v, v), Anchors{pubOf(key)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Add(makeVersion(t, key, "odd", "V1", "x"), Anchors{pubOf(key)}); err != nil {
		t.Fatal(err)
	}
	// Leftovers that are not packages: a crashed Add, a stray file, a
	// version directory without a manifest.
	for _, d := range []string{".add-9.9.9-123", "8.0.0"} {
		if err := os.MkdirAll(filepath.Join(root, "echo", d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "echo", "7.0.0"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	vs, err := s.Versions("echo")
	if err != nil || !slices.Equal(vs, []string{"V3", "1.2.0", "1.9.0", "1.10.0", "2.0.0-rc.1"}) {
		t.Fatalf("Versions: %v, %v", vs, err)
	}
	tests := []struct {
		id, version, want string
		err               string
	}{
		{"echo", "", "1.10.0", ""},
		{"echo", "1.2.0", "1.2.0", ""},
		{"echo", "2.0.0-rc.1", "2.0.0-rc.1", ""},
		{"echo", "V3", "V3", ""},
		{"pre", "", "0.1.0-beta", ""},
		{"echo", "8.0.0", "", "has no echo 8.0.0 (it holds V3, 1.2.0, 1.9.0, 1.10.0, 2.0.0-rc.1)"},
		{"nope", "", "", "has no nope (it holds echo, odd, pre)"},
		{"odd", "", "", "no semantic version of odd (it holds V1; name one)"},
		{"../x", "", "", "not a package id"},
		{"echo", "../x", "", "not a package version"},
	}
	for _, tt := range tests {
		dir, got, err := s.Resolve(tt.id, tt.version)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Resolve(%q, %q) error %v, want %q", tt.id, tt.version, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want || dir != filepath.Join(root, tt.id, tt.want) {
			t.Errorf("Resolve(%q, %q) = %s, %s, %v; want %s", tt.id, tt.version, dir, got, err, tt.want)
		}
	}
	if _, _, err := NewStore(filepath.Join(t.TempDir(), "none"), nil).Resolve("echo", ""); !errors.Is(err, ErrNotInStore) || !strings.Contains(err.Error(), "holds nothing") {
		t.Errorf("empty store: %v", err)
	}
}
