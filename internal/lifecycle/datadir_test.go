package lifecycle

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/identity"
)

// TestOpenChainSaysHowToReset: a chain opens and reopens; one broken in
// its middle refuses the start and names nodeld chain verify and
// --chain-reset; with reset it is archived and a new chain begins.
func TestOpenChainSaysHowToReset(t *testing.T) {
	dir := t.TempDir()
	id, _, err := identity.LoadOrGenerate(identity.KeyPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "chain.log")
	open := func(reset bool) error {
		ch, err := OpenChain(path, id, reset, prometheus.NewRegistry(), zap.NewNop())
		if err != nil {
			return err
		}
		for range 2 {
			if _, err := ch.Append(ChainSource, "node.start", map[string]any{}); err != nil {
				t.Fatal(err)
			}
		}
		return ch.Close()
	}
	if err := open(false); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	// An entry taken out of the middle.
	if err := os.WriteFile(path, []byte(strings.Join(append(lines[:1], lines[2:]...), "")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := open(false); err == nil || !strings.Contains(err.Error(), "--chain-reset") || !strings.Contains(err.Error(), "nodeld chain verify") {
		t.Fatalf("a broken chain opened: %v", err)
	}
	if err := open(true); err != nil {
		t.Fatalf("with reset: %v", err)
	}
}

// TestNewRegistryHasBuildInfo: the registry has nodeld_build_info for the
// version given, and the Go and process collectors.
func TestNewRegistryHasBuildInfo(t *testing.T) {
	reg := NewRegistry("v1.2.3", "go1.26")
	n, err := testutil.GatherAndCount(reg, "nodeld_build_info", "go_goroutines")
	if err != nil || n != 2 {
		t.Fatalf("gathered %d of build info and goroutines (%v)", n, err)
	}
}
