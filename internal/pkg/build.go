package pkg

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nodeld/nodeld/internal/atomicfile"
)

// UpdateFiles sets m.Files from the regular files under dir (every file
// except manifest.json and manifest.sig), with their sizes, SHA-256 and
// exec bits, sorted by path. Symbolic links and other non-regular files
// are errors, as are more than MaxFiles files.
func UpdateFiles(dir string, m *Manifest) error {
	var files []File
	buf := make([]byte, hashBufferBytes)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			return nil
		}
		if rel == ManifestFile || rel == SignatureFile ||
			strings.HasPrefix(rel, atomicfile.TempPrefix(ManifestFile)) || strings.HasPrefix(rel, atomicfile.TempPrefix(SignatureFile)) {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file (links are not allowed in packages)", rel)
		}
		if err := validFilePath(rel); err != nil {
			return err
		}
		if len(files) >= MaxFiles {
			return fmt.Errorf("more than %d files", MaxFiles)
		}
		f, err := hashFile(p, rel, buf)
		if err != nil {
			return err
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		return fmt.Errorf("list package files in %q: %w", dir, err)
	}
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	m.Files = files
	return nil
}

func hashFile(p, rel string, buf []byte) (File, error) {
	f, err := os.Open(p)
	if err != nil {
		return File{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return File{}, err
	}
	if st.Size() > MaxFileSize {
		return File{}, fmt.Errorf("%s has %d bytes, limit %d", rel, st.Size(), int64(MaxFileSize))
	}
	h := sha256.New()
	n, err := io.CopyBuffer(h, f, buf)
	if err != nil {
		return File{}, fmt.Errorf("hash %s: %w", rel, err)
	}
	return File{Path: rel, Size: n, SHA256: hex.EncodeToString(h.Sum(nil)), Exec: st.Mode().Perm()&0o111 != 0}, nil
}

// Build fills m's files from dir (UpdateFiles), sets the schema when it is
// zero, validates m, and writes it to dir/manifest.json atomically. It
// returns the bytes written, which are what Sign then signs. A
// manifest.sig left from before no longer verifies until Sign runs.
func Build(dir string, m Manifest) ([]byte, error) {
	if m.Schema == 0 {
		m.Schema = SchemaVersion
	}
	if err := UpdateFiles(dir, &m); err != nil {
		return nil, err
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("build manifest for %q: %w", dir, err)
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("build manifest for %q: %w", dir, err)
	}
	data = append(data, '\n')
	if len(data) > MaxManifestBytes {
		return nil, fmt.Errorf("build manifest for %q: %d bytes, limit %d", dir, len(data), MaxManifestBytes)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, ManifestFile), data, 0o644); err != nil {
		return nil, fmt.Errorf("build manifest for %q: %w", dir, err)
	}
	return data, nil
}
