package nodeld_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
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

// tickedPackage matches a package path in backticks in a Markdown table.
var tickedPackage = regexp.MustCompile("`((?:internal|cmd|examples|test)/[a-z0-9_/-]+)`")

// architectureSection returns the lines of the "## "+title section of
// docs/architecture.md.
func architectureSection(t *testing.T, title string) []string {
	t.Helper()
	data, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	in := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "## ") {
			in = strings.TrimPrefix(line, "## ") == title
			continue
		}
		if in {
			lines = append(lines, line)
		}
	}
	if lines == nil {
		t.Fatalf("docs/architecture.md has no section %q", title)
	}
	return lines
}

// TestArchitectureTiersTable checks that the tier table of
// docs/architecture.md section 2 places every package where tiers does,
// and names no other.
func TestArchitectureTiersTable(t *testing.T) {
	got := map[string]int{}
	for _, line := range architectureSection(t, "2. The import rule") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 {
			continue
		}
		tier, err := strconv.Atoi(strings.Fields(strings.TrimSpace(cells[1]) + " x")[0])
		if err != nil {
			continue // the header or the rule
		}
		for _, m := range tickedPackage.FindAllStringSubmatch(cells[2], -1) {
			got[m[1]] = tier
		}
	}
	for p, tier := range tiers {
		if g, ok := got[p]; !ok {
			t.Errorf("docs/architecture.md tier table: %s is missing (tier %d in deps_test.go)", p, tier)
		} else if g != tier {
			t.Errorf("docs/architecture.md tier table: %s is in tier %d, deps_test.go says %d", p, g, tier)
		}
	}
	for p := range got {
		if _, ok := tiers[p]; !ok {
			t.Errorf("docs/architecture.md tier table: %s is not in deps_test.go's tiers", p)
		}
	}
}

// TestArchitectureRooms checks that "How to find your way" gives every
// package of internal/ and cmd/ in tiers its one line, and no other.
func TestArchitectureRooms(t *testing.T) {
	rooms := map[string]bool{}
	for _, line := range architectureSection(t, "How to find your way") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		m := tickedPackage.FindStringSubmatch(cells[1])
		if m == nil {
			continue
		}
		if rooms[m[1]] {
			t.Errorf("How to find your way: %s has two lines", m[1])
		}
		rooms[m[1]] = true
	}
	for p := range tiers {
		if (strings.HasPrefix(p, "internal/") || strings.HasPrefix(p, "cmd/")) && !rooms[p] {
			t.Errorf("How to find your way: no line for %s", p)
		}
	}
	for p := range rooms {
		if _, ok := tiers[p]; !ok {
			t.Errorf("How to find your way: %s is not a package of deps_test.go's tiers", p)
		}
	}
}
