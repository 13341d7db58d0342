package nodeld_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// forbiddenDocPaths are paths that exist on a developer's machine but not
// in a user's checkout: the documentation must stand alone.
var forbiddenDocPaths = []string{"../shared", "/work/", "shared/reference", "shared/seeds", "STYLE.md", "DESIGN.md"}

// markdownLink matches the target of an inline Markdown link or image,
// "](target)" or "](target "title")".
var markdownLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// docFiles returns README.md and every Markdown file under docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir("docs", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk docs: %v", err)
	}
	if len(files) < 2 {
		t.Fatal("no Markdown file under docs/")
	}
	return files
}

// TestDocsStandAlone checks that no document points to a file outside the
// repository that users do not have.
func TestDocsStandAlone(t *testing.T) {
	for _, file := range docFiles(t) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			for _, bad := range forbiddenDocPaths {
				if strings.Contains(line, bad) {
					t.Errorf("%s:%d: mentions %q, which is outside the repository: %s", file, i+1, bad, strings.TrimSpace(line))
				}
			}
		}
	}
}

// TestDocsLinks checks that every relative link in README.md and docs/
// names a file or directory of the repository, and that the README links
// the architecture document.
func TestDocsLinks(t *testing.T) {
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	readmeLinks := map[string]bool{}
	for _, file := range docFiles(t) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		inFence := false
		for i, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inFence = !inFence
				continue
			}
			if inFence {
				continue // code, not links
			}
			for _, m := range markdownLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.HasPrefix(target, "#") ||
					strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://") {
					continue
				}
				target, _, _ = strings.Cut(target, "#")
				where := file + ":" + strconv.Itoa(i+1)
				if strings.HasPrefix(target, "/") || strings.Contains(target, "://") {
					t.Errorf("%s: link %q is not relative to the document", where, m[1])
					continue
				}
				path := filepath.Join(root, filepath.Dir(file), filepath.FromSlash(target))
				rel, err := filepath.Rel(root, path)
				if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
					t.Errorf("%s: link %q leaves the repository", where, m[1])
					continue
				}
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s: link %q names nothing in the repository (%s)", where, m[1], filepath.ToSlash(rel))
					continue
				}
				if file == "README.md" {
					readmeLinks[filepath.ToSlash(rel)] = true
				}
			}
		}
		if inFence {
			t.Errorf("%s: unterminated code fence", file)
		}
	}
	if !readmeLinks["docs/architecture.md"] {
		t.Error("README.md does not link docs/architecture.md")
	}
}

// TestDocsLinkPattern checks what TestDocsLinks takes for a link target.
func TestDocsLinkPattern(t *testing.T) {
	for give, want := range map[string]string{
		"see [a](docs/a.md).":           "docs/a.md",
		`[a](../x.md "title")`:          "../x.md",
		"![img](deploy/x.png#frag)":     "deploy/x.png#frag",
		"[a](#anchor)":                  "#anchor",
		"[a](https://example.org/x)":    "https://example.org/x",
		"[`x`](cmd/nodeld/run.go) text": "cmd/nodeld/run.go",
	} {
		m := markdownLink.FindStringSubmatch(give)
		if m == nil {
			t.Errorf("%q: no link found", give)
			continue
		}
		if m[1] != want {
			t.Errorf("%q: target %q, want %q", give, m[1], want)
		}
	}
}
