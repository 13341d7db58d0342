package nodeld_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageDocs checks the house rule: every package has exactly one
// package doc comment, in doc.go, and it says something.
func TestPackageDocs(t *testing.T) {
	for _, p := range listPackages(t) {
		dir, _ := rel(p.ImportPath)
		if dir == "" {
			continue
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var withDoc []string
		for _, e := range entries {
			name := e.Name()
			if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, name), nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if f.Doc != nil {
				withDoc = append(withDoc, name)
				if len(strings.Fields(f.Doc.Text())) < 12 {
					t.Errorf("%s/%s: package doc is too short to state the package's job and contract", dir, name)
				}
			}
		}
		switch {
		case len(withDoc) == 0:
			t.Errorf("%s: no package doc (write doc.go)", dir)
		case len(withDoc) > 1:
			t.Errorf("%s: package doc in %d files %v; keep one, in doc.go", dir, len(withDoc), withDoc)
		case withDoc[0] != "doc.go":
			t.Errorf("%s: package doc is in %s; move it to doc.go", dir, withDoc[0])
		}
	}
}
