package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/operator"
	"github.com/nodeld/nodeld/internal/runner"
	"github.com/nodeld/nodeld/internal/runner/runnertest"
)

// TestNodeDiscoversModelServer: with inference.discover and no instance,
// the node serves its first role from the first candidate that answers
// like its runtime, and status shows it as discovered. (The candidates
// stand in for the well-known ports, which a test never binds.)
func TestNodeDiscoversModelServer(t *testing.T) {
	t.Parallel()
	ollama := runnertest.NewServer(t, "ollama", "llama3.2:3b")
	tn := startNode(t, `node: {data_dir: %s}
log: {level: info, format: json}
admin: {listen: "127.0.0.1:0"}
inference:
  discover: true
  probe_interval: 200ms
  roles:
    - {name: chat, listen: "127.0.0.1:0"}
`, []runner.DiscoverCandidate{
		{Kind: runner.KindLlamaCpp, URL: "http://" + freeAddr(t)},
		{Kind: runner.KindOllama, URL: ollama.URL},
	})
	waitFor(t, "chat served by the discovered Ollama", func() bool {
		st := tn.n.status().(*operator.StatusDoc)
		return len(st.Roles) == 1 && st.Roles[0].Resolved == "local "+ollama.URL
	})
	st := tn.n.status().(*operator.StatusDoc)
	if len(st.Instances) != 1 || !st.Instances[0].Discovered || st.Instances[0].Kind != "ollama" || st.Instances[0].Model != "llama3.2:3b" {
		t.Fatalf("status instances = %+v, want the Ollama server, discovered", st.Instances)
	}
	var out bytes.Buffer
	printStatus(&out, st)
	if !strings.Contains(out.String(), "(discovered)") {
		t.Errorf("nodeld status does not mark the instance discovered:\n%s", out.String())
	}

	// It goes away: the role is withdrawn and the instance dropped.
	ollama.Close()
	waitFor(t, "the discovered server dropped", func() bool {
		st := tn.n.status().(*operator.StatusDoc)
		return st.Roles[0].Resolved == "" && len(st.Instances) == 0
	})
}

// TestDiscoverOnlyWhereSet: the embedded default discovers; a config file
// does not unless it says so (the cluster walk-through's node C keeps
// using the mesh).
func TestDiscoverOnlyWhereSet(t *testing.T) {
	emb, err := reloadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	if ac := runner.AdopterFromConfig(emb, nil); !ac.Discover || ac.DiscoverRole != "chat" {
		t.Errorf("embedded default: discover %v for role %q, want on for chat", ac.Discover, ac.DiscoverRole)
	}
	c, err := reloadConfig("../../configs/cluster/c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if runner.AdopterFromConfig(c, nil).Discover {
		t.Error("configs/cluster/c.yaml discovers without saying so")
	}
}
