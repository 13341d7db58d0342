package meshproxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap/zaptest"

	"github.com/nodeld/nodeld/internal/proxy"
	"github.com/nodeld/nodeld/internal/table"
)

// testDeadline bounds every wait in these tests; reaching it is a failure.
const testDeadline = 10 * time.Second

// fakeResolver is a Resolver over a map, changeable during a test.
type fakeResolver struct {
	mu      sync.Mutex // guards targets
	targets map[string]table.Target
}

func newResolver() *fakeResolver { return &fakeResolver{targets: map[string]table.Target{}} }

func (f *fakeResolver) Resolve(role string) (table.Target, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.targets[role]
	return t, ok
}

// ResolveExcept resolves role unless its target is node: the fake has one
// target per role.
func (f *fakeResolver) ResolveExcept(role, node string) (table.Target, bool) {
	t, ok := f.Resolve(role)
	if ok && t.Kind == table.TargetRemote && t.NodeID == node {
		return table.Target{}, false
	}
	return t, ok
}

func (f *fakeResolver) set(role string, t table.Target) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.targets[role] = t
}

func (f *fakeResolver) local(role, base string) {
	f.set(role, table.Target{Kind: table.TargetLocal, Base: base})
}

// fakePorts records SetProxyPort calls.
type fakePorts struct {
	mu    sync.Mutex // guards ports
	ports map[string]uint16
}

func (f *fakePorts) SetProxyPort(role string, port uint16) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ports == nil {
		f.ports = map[string]uint16{}
	}
	f.ports[role] = port
}

func (f *fakePorts) get(role string) (uint16, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.ports[role]
	return p, ok
}

// The proxy harness, as in package proxy's tests: the mesh tests run a
// consumer's role port in front of the forwarder.

// harness is a running proxy with one role "chat" unless configured.
type harness struct {
	t        *testing.T
	p        *proxy.Proxy
	resolver *fakeResolver
	reg      *prometheus.Registry
	ports    *fakePorts
	client   *http.Client
	done     chan error
}

// startProxy runs a proxy until the test ends. deps may leave Resolver,
// Logger, Registerer and Ports nil: the harness fills them.
func startProxy(t *testing.T, cfg proxy.Config, deps proxy.Deps) *harness {
	t.Helper()
	h := &harness{t: t, resolver: newResolver(), reg: prometheus.NewRegistry(), ports: &fakePorts{}}
	if cfg.Roles == nil {
		cfg.Roles = []proxy.RoleConfig{{Name: "chat", Listen: "127.0.0.1:0"}}
	}
	if deps.Resolver == nil {
		deps.Resolver = h.resolver
	}
	if deps.Logger == nil {
		deps.Logger = zaptest.NewLogger(t)
	}
	if deps.Registerer == nil {
		deps.Registerer = h.reg
	}
	if deps.Ports == nil {
		deps.Ports = h.ports
	}
	p, err := proxy.New(cfg, deps)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.p = p
	ctx, cancel := context.WithCancel(context.Background())
	h.done = make(chan error, 1)
	go func() { h.done <- p.Run(ctx) }()
	select {
	case <-p.Ready():
	case err := <-h.done:
		cancel()
		t.Fatalf("Run: %v", err)
	case <-time.After(testDeadline):
		cancel()
		t.Fatal("proxy not ready")
	}
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 128, DisableCompression: true}
	h.client = &http.Client{Transport: tr}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		cancel()
		select {
		case err := <-h.done:
			if err != nil {
				t.Errorf("Run returned %v", err)
			}
		case <-time.After(testDeadline):
			t.Error("Run did not return")
		}
	})
	return h
}

// url returns the base URL of a role's listener.
func (h *harness) url(role string) string {
	h.t.Helper()
	addr, ok := h.p.Addr(role)
	if !ok {
		h.t.Fatalf("no listener for role %q", role)
	}
	return "http://" + addr.String()
}

// do sends a request and returns the response with its body read.
func (h *harness) do(req *http.Request) (*http.Response, []byte) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(req.Context(), testDeadline)
	defer cancel()
	res, err := h.client.Do(req.WithContext(ctx))
	if err != nil {
		h.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		h.t.Fatalf("read body: %v", err)
	}
	return res, body
}

func (h *harness) post(role, path, body string) (*http.Response, []byte) {
	h.t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.url(role)+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return h.do(req)
}

func (h *harness) get(role, path string) (*http.Response, []byte) {
	h.t.Helper()
	req, err := http.NewRequest(http.MethodGet, h.url(role)+path, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	return h.do(req)
}

// raw writes a raw request to a role's listener and reads one response.
func (h *harness) raw(role, request string) (*http.Response, []byte) {
	h.t.Helper()
	addr, _ := h.p.Addr(role)
	conn, err := net.DialTimeout("tcp", addr.String(), testDeadline)
	if err != nil {
		h.t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(testDeadline))
	if _, err := io.WriteString(conn, request); err != nil {
		h.t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		h.t.Fatalf("read response to %q: %v", request, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res, body
}

// apiError decodes an error body, failing the test if it is not the
// OpenAI shape with a JSON content type.
func apiError(t *testing.T, res *http.Response, body []byte) errorFields {
	t.Helper()
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var eb struct {
		Error *errorFields `json:"error"`
	}
	if err := json.Unmarshal(body, &eb); err != nil || eb.Error == nil {
		t.Fatalf("body %q is not an error object: %v", body, err)
	}
	return *eb.Error
}

// metricValue returns a counter's or gauge's value, or a histogram's
// sample count, for the series with exactly these labels.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if !sameLabels(m.GetLabel(), labels) {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue(), true
			case m.Gauge != nil:
				return m.Gauge.GetValue(), true
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount()), true
			}
		}
	}
	return 0, false
}

func sameLabels(got []*dto.LabelPair, want map[string]string) bool {
	if len(got) != len(want) {
		return false
	}
	for _, lp := range got {
		if want[lp.GetName()] != lp.GetValue() {
			return false
		}
	}
	return true
}

// errorFields is the object of an OpenAI-style error body.
type errorFields struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    string `json:"code"`
}

// asError returns the *proxy.Error err wraps, if any.
func asError(err error) (*proxy.Error, bool) {
	var e *proxy.Error
	ok := errors.As(err, &e)
	return e, ok
}

// wait receives from ch or fails the test at the deadline.
func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(testDeadline):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func chatBody(stream bool) string {
	return fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":%t}`, stream)
}
