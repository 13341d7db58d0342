package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/lifecycle"
	"github.com/nodeld/nodeld/internal/runner"
)

// testNode is a node built by newNode and run by node.run in this
// process, as runDaemon would, on a config file the test can rewrite.
type testNode struct {
	t       *testing.T
	n       *node
	dataDir string
	cfgPath string
	chain   *chain.Chain
	cancel  context.CancelFunc
	done    chan error
}

// startNode writes cfg (a format with one %s for the data dir) to a file,
// builds a node on it and runs it until the test ends. discover replaces
// the well-known discovery candidates (nil keeps the defaults).
func startNode(t *testing.T, cfg string, discover []runner.DiscoverCandidate) *testNode {
	t.Helper()
	return startNodeAt(t, filepath.Join(t.TempDir(), "data"), cfg, discover)
}

// startNodeAt is startNode with the data dir given (a node whose key was
// made first, so that other nodes' configs can name it).
func startNodeAt(t *testing.T, dataDir, cfg string, discover []runner.DiscoverCandidate) *testNode {
	t.Helper()
	tn := buildNode(t, dataDir, cfg, discover)
	ctx, cancel := context.WithCancel(context.Background())
	tn.cancel, tn.done = cancel, make(chan error, 1)
	go func() { tn.done <- tn.n.run(ctx, nil) }()
	t.Cleanup(tn.stop)
	tn.waitReady()
	return tn
}

// buildNode is startNodeAt without the run: the node built, nothing bound.
func buildNode(t *testing.T, dataDir, cfg string, discover []runner.DiscoverCandidate) *testNode {
	t.Helper()
	dir := t.TempDir()
	tn := &testNode{t: t, dataDir: dataDir, cfgPath: filepath.Join(dir, "nodeld.yaml")}
	tn.write(fmt.Sprintf(cfg, tn.dataDir))
	c, err := reloadConfig(tn.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkComponents(c, tn.cfgPath); err != nil {
		t.Fatal(err)
	}
	log := zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))
	if err := lifecycle.EnsureDataDir(c.Node.DataDir, log); err != nil {
		t.Fatal(err)
	}
	id, _, err := identity.LoadOrGenerate(identity.KeyPath(c.Node.DataDir))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	tn.chain, err = lifecycle.OpenChain(filepath.Join(c.Node.DataDir, chainFileName), id, false, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tn.chain.Close() }) // after the node stops (cleanups run last first)
	level := zap.NewAtomicLevelAt(zap.InfoLevel)
	tn.n, err = newNode(c, nodeDeps{
		id: id, chain: tn.chain, reg: reg, log: log, level: level, cfgPath: tn.cfgPath,
		load:  func() (*config.Config, error) { return reloadConfig(tn.cfgPath) },
		hooks: testHooks{discover: discover},
	})
	if err != nil {
		t.Fatal(err)
	}
	return tn
}

func (tn *testNode) write(cfg string) {
	tn.t.Helper()
	if err := os.WriteFile(tn.cfgPath, []byte(cfg), 0o600); err != nil {
		tn.t.Fatal(err)
	}
}

// rewrite replaces the config file with cfg (a format with one %s for
// the data dir).
func (tn *testNode) rewrite(cfg string) { tn.write(fmt.Sprintf(cfg, tn.dataDir)) }

func (tn *testNode) waitReady() {
	tn.t.Helper()
	deadline := time.After(waitTimeout)
	for {
		if ok, _ := tn.n.admin.Ready(); ok {
			return
		}
		select {
		case err := <-tn.done:
			tn.t.Fatalf("node stopped before ready: %v", err)
		case <-deadline:
			tn.t.Fatal("node not ready")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (tn *testNode) stop() {
	tn.cancel()
	select {
	case err := <-tn.done:
		if err != nil {
			tn.t.Errorf("run: %v", err)
		}
	case <-time.After(waitTimeout):
		tn.t.Errorf("run did not return; all goroutines:\n%s", allStacks())
	}
}

// allStacks is every goroutine's stack, so that a node whose shutdown
// hangs names the goroutine it waits on.
func allStacks() string {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	return b.String()
}

// reloadGauge is nodeld_config_last_reload_successful.
func (tn *testNode) reloadGauge() float64 {
	if tn.n.reloader.LastError() != "" {
		return 0
	}
	return 1
}

// lastChainEntry is the kind and payload of the chain's last entry.
func (tn *testNode) lastChainEntry() (string, map[string]any) {
	tn.t.Helper()
	f, err := os.Open(tn.chain.Path())
	if err != nil {
		tn.t.Fatal(err)
	}
	defer f.Close()
	var last struct {
		Kind    string
		Payload map[string]any
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if err := json.Unmarshal(sc.Bytes(), &last); err != nil {
			tn.t.Fatal(err)
		}
	}
	return last.Kind, last.Payload
}

// mustBeFree fails the test unless addr can be bound: nothing holds it.
func mustBeFree(t *testing.T, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("%s is still bound: %v", addr, err)
	}
	ln.Close()
}
