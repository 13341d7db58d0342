package nodeld_test

import (
	"bytes"
	"fmt"
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

// maxWiringLines bounds the daemon wiring of cmd/nodeld: what builds,
// ties, runs and reloads the components (issue 21 point 2: a few hundred
// lines a reader can hold in one sitting, as tailscaled's). Product logic
// lives in the components; what main does by hand for every daemon
// (logger, run group, supervision, reload) lives in internal/lifecycle.
const maxWiringLines = 600

// cliFiles are the files of cmd/nodeld that are not daemon wiring: the
// entry point, flag parsing and subcommands (main.go, cli.go,
// commands.go, and ctl.go, check.go, package.go for nodeld ctl, config
// check and nodeld package), CLI printing, and the package doc. The
// build-tagged testhooks*.go are the --test-* flags of a test build only.
// Every other non-test file counts, so a new file cannot dodge the bound.
var cliFiles = []string{"main.go", "cli.go", "commands.go", "ctl.go", "check.go", "package.go", "doc.go"}

// TestDaemonWiringFits sums the non-test lines of cmd/nodeld's daemon
// wiring (every file but cliFiles and testhooks*.go) and fails above
// maxWiringLines, naming the files it counted.
func TestDaemonWiringFits(t *testing.T) {
	files, err := filepath.Glob("cmd/nodeld/*.go")
	if err != nil {
		t.Fatal(err)
	}
	lines, counted := 0, []string{}
	for _, f := range files {
		base := filepath.Base(f)
		if strings.HasSuffix(base, "_test.go") || slices.Contains(cliFiles, base) || strings.HasPrefix(base, "testhooks") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n := bytes.Count(b, []byte("\n"))
		lines += n
		counted = append(counted, fmt.Sprintf("%s (%d)", base, n))
	}
	if len(counted) == 0 {
		t.Fatal("no daemon wiring file found in cmd/nodeld")
	}
	if lines > maxWiringLines {
		t.Errorf("cmd/nodeld's daemon wiring is %d lines, want at most %d; counted %s", lines, maxWiringLines, strings.Join(counted, ", "))
	}
	for _, f := range files {
		if base := filepath.Base(f); strings.HasPrefix(base, "testhooks") && !strings.HasSuffix(base, "_test.go") {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(b, []byte("//go:build ")) {
				t.Errorf("%s is not build-tagged: it would be in the shipped binary and escape the wiring bound", f)
			}
		}
	}
}
