package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/table"
)

// TestMeasuredPerfReachesSignedFacts serves a role from an adopted
// instance and checks that, once enough requests went through the
// role's port, the node's signed facts carry its measured time to first
// byte and tokens per second as perf.infer.chat records.
func TestMeasuredPerfReachesSignedFacts(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/models":
			fmt.Fprint(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
		default:
			time.Sleep(10 * time.Millisecond) // the generation
			fmt.Fprint(w, `{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":40,"total_tokens":43}}`)
		}
	}))
	defer up.Close()
	tn := startNode(t, `node: {data_dir: %s}
log: {level: info, format: json}
admin: {listen: "127.0.0.1:0"}
inference:
  roles:
    - {name: chat, listen: "127.0.0.1:0"}
  instances:
    - {role: chat, runtime: openai, url: `+up.URL+`}
`, nil)
	tn.waitReady()
	deadline := time.Now().Add(waitTimeout)
	for {
		if target, ok := tn.n.table.Resolve("chat"); ok && target.Kind == table.TargetLocal {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the adopted instance never served chat")
		}
		time.Sleep(10 * time.Millisecond)
	}
	addr, _ := tn.n.proxy.Addr("chat")
	for i := range facts.MinPerfSamples {
		res, err := http.Post("http://"+addr.String()+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %s", i, res.Status)
		}
	}
	s, err := tn.n.facts.Signed(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	f, _, err := facts.Verify(s, tn.n.id.PublicKey(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, c := range f.Capabilities {
		if c.ID != grammar.CapPerfInfer+".chat" || c.Provenance != grammar.ProvenanceMeasured {
			continue
		}
		metric, _ := c.Attrs[grammar.AttrMetric].Str()
		v, _ := c.Attrs[grammar.AttrValue].Number()
		n, _ := c.Attrs[grammar.AttrSamples].Int()
		if n != facts.MinPerfSamples {
			t.Errorf("%s rests on %d samples, want %d", metric, n, facts.MinPerfSamples)
		}
		got[metric] = v
	}
	if ttfb := got[grammar.PerfMetricTTFBMillis]; ttfb < 10 || ttfb > float64(waitTimeout/time.Millisecond) {
		t.Errorf("ttfb_ms %v, want at least the upstream's 10 ms (records %v)", ttfb, got)
	}
	// 40 tokens in at least 10 ms.
	if tps := got[grammar.PerfMetricTokensPerSecond]; tps <= 0 || tps > 4000 {
		t.Errorf("tokens_per_s %v (records %v)", tps, got)
	}
}
