package nodeld_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repoPath matches a path into the code that a document may name:
// "internal/runner", "internal/proxy/handler.go", "cmd/nodeld/run.go",
// "cmd/nodeld/meshtest_*_test.go".
var repoPath = regexp.MustCompile(`\b(?:internal|cmd/nodeld)/[A-Za-z0-9_.*/-]*[A-Za-z0-9_*/]`)

// packageDocs returns every doc.go of the module, skipping testdata.
func packageDocs(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != "." {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "doc.go" {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk: %v", err)
	}
	return files
}

// TestDocsNameExistingPaths checks that every path into internal/ or
// cmd/nodeld that README.md, docs/*.md or a package's doc.go names exists,
// so a renamed or moved package cannot leave its old name behind (the
// docs once named internal/runtime, which is internal/runner).
func TestDocsNameExistingPaths(t *testing.T) {
	files := append(docFiles(t), packageDocs(t)...)
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			for _, p := range repoPath.FindAllString(line, -1) {
				p = strings.TrimRight(p, "/")
				matches, err := filepath.Glob(filepath.FromSlash(p))
				if err != nil || len(matches) == 0 {
					t.Errorf("%s:%d: names %s, which does not exist", file, i+1, p)
				}
			}
		}
	}
}

// TestRepoPathPattern checks what TestDocsNameExistingPaths takes for a
// path.
func TestRepoPathPattern(t *testing.T) {
	for give, want := range map[string]string{
		"through internal/runner, supervises":        "internal/runner",
		"(`internal/proxy/handler.go`).":             "internal/proxy/handler.go",
		"in [x](../internal/engine/example_test.go)": "internal/engine/example_test.go",
		"`cmd/nodeld/meshtest_*_test.go` run":        "cmd/nodeld/meshtest_*_test.go",
		"the mesh (internal/mesh/), then":            "internal/mesh/",
		"an internal/ package":                       "",
	} {
		got := repoPath.FindString(give)
		if got != want {
			t.Errorf("%q: path %q, want %q", give, got, want)
		}
	}
}

// maxDocLines bounds a package comment: a doc.go says the package's job,
// its invariants and its concurrency in well under a page, and points at
// docs/ for the long story.
const maxDocLines = 40

// TestPackageDocShape checks that every package comment under internal/
// and cmd/ fits in maxDocLines, and that each package of the import tiers
// there (test doubles aside) has its "# Invariants" and "# Concurrency"
// sections.
func TestPackageDocShape(t *testing.T) {
	for _, file := range packageDocs(t) {
		dir := filepath.ToSlash(filepath.Dir(file))
		if !strings.HasPrefix(dir, "internal/") && !strings.HasPrefix(dir, "cmd/") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc == nil {
			continue // TestPackageDocs reports it
		}
		text := f.Doc.Text()
		if n := strings.Count(text, "\n"); n > maxDocLines {
			t.Errorf("%s: package comment is %d lines, over %d: keep the job, invariants and concurrency, and move the long story to docs/", file, n, maxDocLines)
		}
		if _, ok := tiers[dir]; !ok {
			continue
		}
		for _, section := range []string{"# Invariants", "# Concurrency"} {
			if !strings.Contains("\n"+text, "\n"+section+"\n") {
				t.Errorf("%s: package comment has no %q section", file, section)
			}
		}
	}
}
