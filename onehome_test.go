package nodeld_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/grammar"
)

// sourceFile is one non-test Go file of the module with its syntax tree.
type sourceFile struct {
	path string
	src  []byte
	ast  *ast.File
}

// moduleSources parses every non-test Go file under cmd/ and internal/.
func moduleSources(t *testing.T) []sourceFile {
	t.Helper()
	var out []sourceFile
	fset := token.NewFileSet()
	for _, root := range []string{"cmd", "internal"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			out = append(out, sourceFile{path: filepath.ToSlash(path), src: src, ast: f})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(out) < 50 {
		t.Fatalf("only %d source files found", len(out))
	}
	return out
}

// stringLits returns where each string literal value occurs, by value.
func stringLits(files []sourceFile) map[string][]string {
	lits := map[string][]string{}
	for _, f := range files {
		ast.Inspect(f.ast, func(n ast.Node) bool {
			if bl, ok := n.(*ast.BasicLit); ok && bl.Kind == token.STRING {
				if v, err := strconv.Unquote(bl.Value); err == nil {
					lits[v] = append(lits[v], f.path)
				}
			}
			return true
		})
	}
	return lits
}

// funcsNamed returns the files that declare a top-level function whose
// name matches re (methods excluded).
func funcsNamed(files []sourceFile, re *regexp.Regexp) []string {
	var out []string
	for _, f := range files {
		for _, d := range f.ast.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && re.MatchString(fd.Name.Name) {
				out = append(out, f.path+": "+fd.Name.Name)
			}
		}
	}
	return out
}

// TestOneHomePerRule: the rules issue 21 gave one home each keep it. A
// second spelling of "self" or of a trust tier, a second syncDir, or a
// hand copy of strings.Compare fails here.
func TestOneHomePerRule(t *testing.T) {
	files := moduleSources(t)
	lits := stringLits(files)

	// One SelfRef: "self" is spelled in config only.
	if got := lits[config.SelfRef]; !slices.Equal(got, []string{"internal/config/limits.go"}) {
		t.Errorf("%q is spelled in %v; name it config.SelfRef", config.SelfRef, got)
	}

	// The trust tiers are spelled in grammar only. "pinned" is also a
	// decision flag of the engine (a pinned workload), not a tier.
	for _, tier := range grammar.TrustTiers() {
		for _, where := range lits[tier] {
			if where == "internal/grammar/trust.go" || tier == grammar.TierPinned && where == "internal/engine/decision.go" {
				continue
			}
			t.Errorf("trust tier %q spelled in %s; use grammar.TrustTiers and its constants", tier, where)
		}
	}

	// One syncDir: atomicfile's, and the isolated chain's twin.
	syncDirs := funcsNamed(files, regexp.MustCompile(`^(?i)syncdir$`))
	if want := []string{"internal/atomicfile/atomicfile.go: SyncDir", "internal/chain/chain.go: syncDir"}; !slices.Equal(syncDirs, want) {
		t.Errorf("syncDir is written in %v, want only %v", syncDirs, want)
	}

	// No hand copy of strings.Compare / cmp.Compare.
	handCompare := regexp.MustCompile(`case a < b:\s*return -1\s*case a > b:\s*return 1`)
	for _, f := range files {
		if handCompare.Match(f.src) {
			t.Errorf("%s hand-copies strings.Compare; call strings.Compare or cmp.Compare", f.path)
		}
	}
}

// TestTrustTiersOneList: config validation, the engine's trust ranks
// and the docs all take the tiers from grammar.TrustTiers, in its order:
// a tier added or renamed there reaches every one of them, and one
// spelled differently anywhere breaks this test.
func TestTrustTiersOneList(t *testing.T) {
	tiers := grammar.TrustTiers()
	for i, tier := range tiers {
		tr, ok := engine.ParseTrust(tier)
		if !ok || tr.String() != tier || int(tr) != i+1 {
			t.Errorf("engine.ParseTrust(%q) = %v (%d), %v", tier, tr, tr, ok)
		}
		yaml := "mesh:\n  listen: 127.0.0.1:7400\n  peers:\n    - {name: p, addr: 127.0.0.1:7401, tier: " + tier + "}\n" +
			"controller:\n  enabled: true\n  policy:\n    kinds: {inference: {min_tier: " + tier + "}}\n"
		if _, err := config.Check([]byte(yaml)); err != nil {
			t.Errorf("config with tier %q: %v", tier, err)
		}
	}
	_, err := config.Check([]byte("mesh:\n  listen: 127.0.0.1:7400\n  peers:\n    - {name: p, addr: 127.0.0.1:7401, tier: trusted}\n"))
	if err == nil || !strings.Contains(err.Error(), grammar.TrustTierWords()) {
		t.Errorf("config with tier trusted: %v, want it refused naming %s", err, grammar.TrustTierWords())
	}
	if engine.TrustPinned != engine.Trust(len(tiers)) {
		t.Errorf("engine.TrustPinned = %d, want the highest of %d tiers", engine.TrustPinned, len(tiers))
	}
	order := strings.Join(tiers, " < ")
	for _, doc := range []string{"README.md", "docs/architecture.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), order) {
			t.Errorf("%s does not list the trust tiers as %q", doc, order)
		}
	}
}
