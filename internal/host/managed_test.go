package host

import (
	"crypto/ed25519"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/runner"
	"github.com/nodeld/nodeld/internal/runner/runnertest"
)

// buildOllama builds an inference package of role chat run by Ollama with
// model.
func buildOllama(t testing.TB, key ed25519.PrivateKey, model string) testPackage {
	t.Helper()
	m := pkg.Manifest{ID: "ollama-chat", Version: "1.0.0", Kind: pkg.KindInference, Role: "chat",
		Runtime:  pkg.Runtime{Type: grammar.RuntimeOllama, Model: model},
		Variants: []pkg.Variant{{Name: "default"}}}
	return signPackage(t, t.TempDir(), m, key)
}

// ollamaCluster is a host driving the fake Ollama daemon o.
func ollamaCluster(t *testing.T, o *runnertest.Ollama, policy runner.RestartPolicy) *cluster {
	t.Helper()
	c := newCluster(t, clusterOpts{policy: policy, noFacts: true})
	c.h.lc.mu.Lock()
	c.h.lc.ollamaURL = o.URL
	c.h.lc.mu.Unlock()
	return c
}

func (c *cluster) instanceStatus(t *testing.T, id string) ctl.InstanceStatus {
	t.Helper()
	var st ctl.InstanceStatus
	c.mustCall(t, ctl.MethodStatus, ctl.InstanceParams{InstanceID: id}, "", &st)
	return st
}

// TestOllamaInstanceLeavesRunningAndComesBack: when the Ollama daemon dies
// the instance stops showing running at the first health check (reason
// health, its role withdrawn), and when the daemon is back the supervisor
// loads the model again and the instance is running and serving, with
// the time of each state in its status.
func TestOllamaInstanceLeavesRunningAndComesBack(t *testing.T) {
	ollama := runnertest.NewOllama(t, nil, "llama3.2:1b")
	// A budget the outage cannot spend: restarts every 20 to 50 ms.
	c := ollamaCluster(t, ollama, runner.RestartPolicy{Max: 100, Window: time.Minute, Backoff: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	p := buildOllama(t, c.publisher, "llama3.2:1b")
	id, base := c.placeRunning(t, p)
	if base != ollama.URL {
		t.Fatalf("serving %s, want the daemon %s", base, ollama.URL)
	}
	st := c.instanceStatus(t, id)
	if st.Status.State != ctl.StateRunning || st.Status.Since.IsZero() || st.Status.Reason != "" {
		t.Fatalf("status after place: %+v", st.Status)
	}
	runningSince := st.Status.Since

	ollama.Kill()
	meshtest.WaitFor(t, "unhealthy", func() bool { return c.state(id) != ctl.StateRunning })
	st = c.instanceStatus(t, id)
	if st.Status.State == ctl.StateFailed || st.Status.Reason == "" || !st.Status.Since.After(runningSince) {
		t.Errorf("status with the daemon down: %+v", st.Status)
	}
	if c.servedNow() != "" {
		t.Error("chat still served locally with the daemon down")
	}

	ollama.Revive()
	meshtest.WaitFor(t, "running again", func() bool { return c.state(id) == ctl.StateRunning })
	c.waitRegistered(t, ollama.URL)
	st = c.instanceStatus(t, id)
	if st.Status.Reason != "" || st.Status.Since.IsZero() {
		t.Errorf("status once back: %+v", st.Status)
	}
	if exp, ok := ollama.Loaded()["llama3.2:1b"]; !ok || time.Until(exp) < 100*365*24*time.Hour {
		t.Errorf("model after the daemon came back: loaded %v, expires %s; want pinned", ok, exp)
	}
}

// TestOllamaInstanceFailsWithAReason: a daemon down past the restart
// budget leaves the instance failed, reason restart_budget, with when;
// the failure is chained with the code; a start brings it back once the
// daemon is.
func TestOllamaInstanceFailsWithAReason(t *testing.T) {
	ollama := runnertest.NewOllama(t, nil, "llama3.2:1b")
	c := ollamaCluster(t, ollama, runner.RestartPolicy{Max: 1, Window: time.Minute, Backoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	p := buildOllama(t, c.publisher, "llama3.2:1b")
	id, _ := c.placeRunning(t, p)
	before := time.Now()
	ollama.Kill()
	// The state changes under the instance lock; the metric and the chain
	// record follow it, so wait for the record too.
	meshtest.WaitFor(t, "failed and chained", func() bool {
		return c.state(id) == ctl.StateFailed && len(c.audit.ofKind(KindFailed)) > 0
	})
	st := c.instanceStatus(t, id)
	if st.Status.Reason != ctl.ReasonRestartBudget || st.Status.Since.Before(before) || !strings.Contains(st.Status.Detail, "restart budget spent") {
		t.Errorf("failed status: %+v", st.Status)
	}
	failed := c.audit.ofKind(KindFailed)
	if len(failed) != 1 || failed[0]["code"] != ctl.ReasonRestartBudget {
		t.Errorf("host.failed records: %v", failed)
	}
	if n := testutil.ToFloat64(c.h.met.failures.WithLabelValues(ctl.ReasonRestartBudget)); n != 1 {
		t.Errorf("nodeld_host_instance_failures_total{reason=restart_budget} = %v, want 1", n)
	}
	list := c.h.Status()
	if len(list.Instances) != 1 || list.Instances[0].Reason != ctl.ReasonRestartBudget || list.Instances[0].Since.IsZero() {
		t.Errorf("/v1/status instance: %+v", list.Instances)
	}

	ollama.Revive()
	c.mustCall(t, ctl.MethodStart, ctl.InstanceParams{InstanceID: id}, newDecision(), nil)
	st = c.instanceStatus(t, id)
	if st.Status.State != ctl.StateRunning || st.Status.Reason != "" {
		t.Errorf("after start: %+v", st.Status)
	}
}

// TestOllamaStartFailureKeepsOllamasText: a start that Ollama refuses
// says what Ollama said, in the refusal and the status, and leaves the
// instance failed (start_failed), not stopped as if an operator had
// stopped it; a place whose start fails says it too.
func TestOllamaStartFailureKeepsOllamasText(t *testing.T) {
	ollama := runnertest.NewOllama(t, nil, "llama3.2:1b")
	c := ollamaCluster(t, ollama, runner.RestartPolicy{})
	p := buildOllama(t, c.publisher, "qwen3:0.6b")
	const said = "HTTP 404: model 'qwen3:0.6b' not found"
	if _, _, err := c.place(t, p, true); refusalCode(err) != ctl.CodeRuntime || !strings.Contains(err.Error(), said) {
		t.Errorf("place with start: %v, want Ollama's text", err)
	}
	res, _, err := c.place(t, p, false)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	_, err = c.call(t, ctl.MethodStart, ctl.InstanceParams{InstanceID: res.InstanceID}, newDecision())
	if refusalCode(err) != ctl.CodeRuntime || !strings.Contains(err.Error(), said) {
		t.Errorf("start: %v, want Ollama's text", err)
	}
	st := c.instanceStatus(t, res.InstanceID)
	if st.Status.State != ctl.StateFailed || st.Status.Reason != ctl.ReasonStartFailed ||
		!strings.Contains(st.Status.Detail, said) || st.Status.Since.IsZero() {
		t.Errorf("status after the failed start: %+v", st.Status)
	}
	if n := testutil.ToFloat64(c.h.met.failures.WithLabelValues(ctl.ReasonStartFailed)); n != 1 {
		t.Errorf("nodeld_host_instance_failures_total{reason=start_failed} = %v, want 1", n)
	}
}
