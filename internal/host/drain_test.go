package host

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/runner"
	"github.com/nodeld/nodeld/internal/table"
)

// standbyModel is the model the adopted standby server answers with.
const standbyModel = "standby-m"

// newStandby starts an OpenAI-compatible server that answers chat
// completions as echo-llm does, under standbyModel, and an Adopter that
// registers it for chat (standing by behind any placed instance).
func (c *cluster) newStandby(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/models":
			_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"`+standbyModel+`","object":"model"}]}`)
		case "/v1/chat/completions":
			var req struct {
				Messages []struct {
					Content string `json:"content"`
				} `json:"messages"`
			}
			_ = json.NewDecoder(r.Body).Decode(&req)
			prompt := ""
			if len(req.Messages) > 0 {
				prompt = req.Messages[len(req.Messages)-1].Content
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"model": standbyModel,
				"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": "echo: " + prompt}}}})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	a, err := runner.NewAdopter(runner.AdopterConfig{
		Instances: []runner.AdoptedInstance{{Role: "chat", Kind: runner.KindOpenAI, URL: srv.URL}},
		Interval:  100 * time.Millisecond,
	}, adoptedRegistrar{c.hostNode.Table}, zaptest.NewLogger(t).Named("adopter"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("adopter run: %v", err)
		}
	})
	c.waitRegistered(t, srv.URL)
	return srv.URL
}

// roleFront is a role port as the proxy serves it, reduced to the part
// this package relies on: each request resolves the role with a hold
// (table.ResolveHeld), is forwarded to the local instance over a shared
// keep-alive pool, and gives the hold back once the exchange has ended.
type roleFront struct {
	tb *table.Table
	tr *http.Transport
}

func (f *roleFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tg, hold, ok := f.tb.ResolveHeld("chat")
	defer hold.Done()
	if !ok || tg.Kind != table.TargetLocal {
		http.Error(w, "no instance serves chat", http.StatusServiceUnavailable)
		return
	}
	u, err := url.Parse(tg.Base)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(u) },
		Transport: f.tr,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, "route local "+tg.Base+": "+err.Error(), http.StatusBadGateway)
		},
	}
	rp.ServeHTTP(w, r)
}

// newRoleFront serves a roleFront on a loopback port until the test ends.
func newRoleFront(t *testing.T, tb *table.Table) string {
	t.Helper()
	f := &roleFront{tb: tb, tr: &http.Transport{MaxIdleConnsPerHost: 16}}
	srv := httptest.NewServer(f)
	t.Cleanup(func() {
		srv.Close()
		f.tr.CloseIdleConnections()
	})
	return srv.URL
}

// hammer drives a role port with workers that each send their next chat
// completion as soon as the last one ended, and checks every answer: a
// 200 that echoes the prompt, counted by the model that answered.
type hammer struct {
	url    string
	client *http.Client
	stop   chan struct{}
	wg     sync.WaitGroup

	mu       sync.Mutex
	byModel  map[string]int
	failures []string
}

func startHammer(t *testing.T, base string, workers int) *hammer {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: workers}
	hm := &hammer{url: base + "/v1/chat/completions", client: &http.Client{Transport: tr, Timeout: waitTimeout},
		stop: make(chan struct{}), byModel: map[string]int{}}
	for w := range workers {
		hm.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-hm.stop:
					return
				default:
				}
				hm.one(fmt.Sprintf("w%d r%d", w, i))
			}
		})
	}
	t.Cleanup(func() {
		hm.finish()
		tr.CloseIdleConnections()
	})
	return hm
}

func (hm *hammer) one(prompt string) {
	body, _ := json.Marshal(map[string]any{"messages": []any{map[string]any{"role": "user", "content": prompt}}})
	resp, err := hm.client.Post(hm.url, "application/json", bytes.NewReader(body))
	if err != nil {
		hm.fail(prompt + ": " + err.Error())
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	var ans struct {
		Model   string `json:"model"`
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	switch {
	case err != nil:
		hm.fail(prompt + ": reading the answer: " + err.Error())
	case resp.StatusCode != http.StatusOK:
		hm.fail(fmt.Sprintf("%s: %d %s", prompt, resp.StatusCode, strings.TrimSpace(string(b))))
	case json.Unmarshal(b, &ans) != nil || len(ans.Choices) != 1 || ans.Choices[0].Message.Content != "echo: "+prompt:
		hm.fail(fmt.Sprintf("%s: wrong answer %s", prompt, b))
	default:
		hm.mu.Lock()
		hm.byModel[ans.Model]++
		hm.mu.Unlock()
	}
}

func (hm *hammer) fail(msg string) {
	hm.mu.Lock()
	hm.failures = append(hm.failures, msg)
	hm.mu.Unlock()
}

func (hm *hammer) served(model string) int {
	hm.mu.Lock()
	defer hm.mu.Unlock()
	return hm.byModel[model]
}

// finish stops the workers and waits for them; idempotent.
func (hm *hammer) finish() {
	select {
	case <-hm.stop:
	default:
		close(hm.stop)
	}
	hm.wg.Wait()
}

// TestStopUnderLoadHandsOverWithoutErrors: a placed echo-llm serves chat,
// an adopted server stands by, and clients drive the role port
// continuously while the placed instance is stopped (three times, with a
// start between) and then unloaded: every request is answered, by one or
// the other. The host used to stop the process first and release the
// registration only once it had exited, so for the length of the stop
// the role still resolved to a closed port: a few requests of every stop
// were answered 502.
func TestStopUnderLoadHandsOverWithoutErrors(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	id, _ := c.placeRunning(t, buildEcho(t, c.publisher))
	c.newStandby(t)
	hm := startHammer(t, newRoleFront(t, c.hostNode.Table), 3)

	const rounds, each = 3, 40
	for round := range rounds {
		placed, standby := hm.served("echo-1"), hm.served(standbyModel)
		meshtest.WaitFor(t, fmt.Sprintf("round %d: answers from the placed instance", round), func() bool { return hm.served("echo-1") >= placed+each })
		if round < rounds-1 {
			c.stop(t, id)
		} else {
			c.mustCall(t, ctl.MethodUnload, ctl.InstanceParams{InstanceID: id}, newDecision(), nil)
		}
		meshtest.WaitFor(t, fmt.Sprintf("round %d: answers from the standby", round), func() bool { return hm.served(standbyModel) >= standby+each })
		if round < rounds-1 {
			c.mustCall(t, ctl.MethodStart, ctl.InstanceParams{InstanceID: id}, newDecision(), nil)
			base := c.endpoint(t, id)
			meshtest.WaitFor(t, "the placed instance serving again", func() bool { return c.servedNow() == base })
		}
	}
	hm.finish()
	t.Logf("answers by model: %v", hm.byModel)
	for _, f := range hm.failures {
		t.Error(f)
	}
	if n := testutil.ToFloat64(c.h.met.drainsCut); n != 0 {
		t.Errorf("%v stops cut requests in flight", n)
	}
}

// TestStopWaitsForHeldForwards: a forward that resolved to the placed
// instance and has not reached it yet keeps the stop waiting (the role
// already resolves to the standby, and the status says why the instance
// is still up); its request is then answered whole by the instance, and
// the stop completes as soon as its hold is given back, long before the
// grace.
func TestStopWaitsForHeldForwards(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	id, base := c.placeRunning(t, buildEcho(t, c.publisher))
	standby := c.newStandby(t)

	tg, hold, ok := c.hostNode.Table.ResolveHeld("chat")
	if !ok || tg.Base != base {
		t.Fatalf("chat resolves to %+v, want the placed instance %s", tg, base)
	}
	stopped := make(chan error, 1)
	go func() {
		_, err := c.call(t, ctl.MethodStop, ctl.InstanceParams{InstanceID: id, GraceMS: 60_000}, newDecision())
		stopped <- err
	}()
	meshtest.WaitFor(t, "the stop to wait for the held forward", func() bool {
		return c.instance(id).snapshot().detail == drainingDetail
	})
	if got := c.servedNow(); got != standby {
		t.Fatalf("while the stop waits chat resolves to %q, want the standby %s", got, standby)
	}
	// The held forward reaches the instance now: still up, it answers.
	resp, err := http.Post(tg.Base+"/v1/chat/completions", "application/json", strings.NewReader(`{"messages":[{"role":"user","content":"late"}]}`))
	if err != nil {
		t.Fatalf("the held forward: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "echo: late") {
		t.Fatalf("the held forward: %d %s %v", resp.StatusCode, b, err)
	}
	select {
	case err := <-stopped:
		t.Fatalf("the stop returned (%v) while a forward held the instance", err)
	default:
	}
	hold.Done()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("stop: %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the stop did not complete once the hold was given back")
	}
	if st := c.instance(id).snapshot(); st.state != ctl.StateStopped || c.instance(id).managed.Alive() {
		t.Fatalf("after the stop: state %q, alive %v", st.state, c.instance(id).managed.Alive())
	}
	if n := testutil.ToFloat64(c.h.met.drainsCut); n != 0 {
		t.Fatalf("drain timeouts = %v, want 0", n)
	}
}

// TestStopDrainIsBounded: a hold never given back delays the stop by the
// grace only; the instance is then stopped anyway, and the cut is counted.
func TestStopDrainIsBounded(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	id, _ := c.placeRunning(t, buildEcho(t, c.publisher))
	_, hold, _ := c.hostNode.Table.ResolveHeld("chat")
	defer hold.Done()
	c.mustCall(t, ctl.MethodStop, ctl.InstanceParams{InstanceID: id, GraceMS: 100}, newDecision(), nil)
	if in := c.instance(id); in.snapshot().state != ctl.StateStopped || in.managed.Alive() {
		t.Fatalf("after the stop: state %q, alive %v", in.snapshot().state, in.managed.Alive())
	}
	if got := c.servedNow(); got != "" {
		t.Fatalf("chat resolves to %q after the stop", got)
	}
	if n := testutil.ToFloat64(c.h.met.drainsCut); n != 1 {
		t.Fatalf("drain timeouts = %v, want 1", n)
	}
}
