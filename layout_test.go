package nodeld_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxProxyLines bounds internal/proxy's non-test code: the role servers,
// guards, routing and errors. The mesh inference protocol lives in
// internal/meshproxy, the HTTP/1.1 stack in internal/httpfast.
const maxProxyLines = 3000

// TestProxyInThree checks the proxy's split: internal/proxy stays under
// maxProxyLines, the mesh protocol and the HTTP stack are packages of
// their own, and no test-only ReverseProxy branch is left in the proxy
// (tests reach a fake instance through Deps.Dial).
func TestProxyInThree(t *testing.T) {
	files, err := filepath.Glob("internal/proxy/*.go")
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines += bytes.Count(b, []byte("\n"))
		if base := filepath.Base(f); strings.HasPrefix(base, "mesh_") || slices.Contains([]string{"fastserve.go", "upstream.go", "resphead.go", "exchangectx.go"}, base) {
			t.Errorf("%s belongs to internal/meshproxy or internal/httpfast", f)
		}
	}
	if lines >= maxProxyLines {
		t.Errorf("internal/proxy has %d lines of non-test code, want under %d", lines, maxProxyLines)
	}
	imports := map[string][]string{}
	for _, p := range listPackages(t) {
		imports[p.ImportPath] = p.Imports
	}
	for _, pkg := range []string{"internal/meshproxy", "internal/httpfast", "internal/modelpin"} {
		if _, ok := imports[module+"/"+pkg]; !ok {
			t.Errorf("%s is missing", pkg)
		}
	}
	if slices.Contains(imports[module+"/internal/proxy"], "net/http/httputil") {
		t.Error("internal/proxy imports net/http/httputil: the ReverseProxy branch is back")
	}
	if slices.Contains(imports[module+"/internal/proxy"], module+"/internal/meshproxy") {
		t.Error("internal/proxy imports internal/meshproxy: it should know the forwarder by RemoteForwarder only")
	}
}
