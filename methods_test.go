package nodeld_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxMethods bounds the methods of one named type in internal/ (issue 21
// point 4): a type with more has several jobs, and each job reads better
// as a type of its own with its own small method set and lock.
const maxMethods = 30

// manyMethods are the types allowed over maxMethods for now, each with
// why. An entry whose type is back under the bound must go.
var manyMethods = map[string]string{}

// TestTypesWithOneJob counts the methods (exported or not, distinct by
// name across build variants) of every named type declared in internal/
// outside tests, and fails for one over maxMethods that manyMethods does
// not list, and for an entry of manyMethods that is no longer over.
func TestTypesWithOneJob(t *testing.T) {
	counts := methodCounts(t, "internal")
	if len(counts) == 0 {
		t.Fatal("no method found under internal/")
	}
	for name, n := range counts {
		if n > maxMethods && manyMethods[name] == "" {
			t.Errorf("%s has %d methods, bound %d: split it into types with one job each", name, n, maxMethods)
		}
	}
	for name := range manyMethods {
		if n := counts[name]; n <= maxMethods {
			t.Errorf("%s has %d methods, within the bound %d: remove it from manyMethods", name, n, maxMethods)
		}
	}
}

// methodCounts maps "<package dir>.<Type>" (the package's directory below
// root, so internal/host's Host is host.Host and internal/mesh/meshtest's
// Cluster mesh/meshtest.Cluster) to the number of distinct method names
// declared on it in the non-test files under root.
func methodCounts(t *testing.T, root string) map[string]int {
	t.Helper()
	methods := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == "testdata" || (strings.HasPrefix(name, ".") && path != root) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkg, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		pkg = filepath.ToSlash(pkg)
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) != 1 {
				continue
			}
			recv := receiverName(fn.Recv.List[0].Type)
			if recv == "" {
				continue
			}
			key := pkg + "." + recv
			if !slices.Contains(methods[key], fn.Name.Name) {
				methods[key] = append(methods[key], fn.Name.Name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	counts := make(map[string]int, len(methods))
	for k, m := range methods {
		counts[k] = len(m)
	}
	return counts
}

// receiverName is the type name of a receiver: T, *T, T[P] or *T[P].
func receiverName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}
