package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
)

func TestNewRefusesNonLoopback(t *testing.T) {
	deps := Deps{Gatherer: prometheus.NewRegistry(), Status: func() any { return nil }}
	for _, addr := range []string{"0.0.0.0:9464", "10.0.0.1:9464", "example.com:9464", "nope", "localhost:0"} {
		if _, err := New(Config{Listen: addr}, deps); err == nil {
			t.Errorf("New accepted %q", addr)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0", "[::ffff:127.0.0.1]:0"} {
		if _, err := New(Config{Listen: addr}, deps); err != nil {
			t.Errorf("New refused %q: %v", addr, err)
		}
	}
}

func TestServerEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "nodeld_test_things_total", Help: "Things."})
	reg.MustRegister(c)
	c.Inc()
	s, err := New(Config{Listen: "127.0.0.1:0"}, Deps{
		Gatherer: reg,
		Status:   func() any { return map[string]string{"node_id": "n-0123456789abcdef"} },
		Logger:   zaptest.NewLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Require("proxy")
	s.Require("chain")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	<-s.Bound()
	base := "http://" + s.Addr().String()

	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("/healthz = %d", code)
	}
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "chain") || !strings.Contains(body, "proxy") {
		t.Fatalf("/readyz before ready = %d %q", code, body)
	}
	if s.RequiredMet() {
		t.Fatal("RequiredMet = true before the required conditions are set")
	}
	s.SetReady("proxy", true)
	if code, body := get("/readyz"); code != 503 || strings.Contains(body, "proxy") {
		t.Fatalf("/readyz half ready = %d %q", code, body)
	}
	s.SetReady("chain", true)
	if code, _ := get("/readyz"); code != 200 {
		t.Fatalf("/readyz ready = %d", code)
	}
	// A check is evaluated on every request and says why it fails.
	var disk atomic.Pointer[error]
	s.Check("disk", func() error {
		if p := disk.Load(); p != nil {
			return *p
		}
		return nil
	})
	if code, _ := get("/readyz"); code != 200 {
		t.Fatalf("/readyz with a passing check = %d", code)
	}
	full := errors.New("no space left on device")
	disk.Store(&full)
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "disk: no space left on device") {
		t.Fatalf("/readyz with a failing check = %d %q", code, body)
	}
	if ok, unmet := s.Ready(); ok || len(unmet) != 1 || unmet[0] != "disk: no space left on device" {
		t.Fatalf("Ready = %v, %q", ok, unmet)
	}
	if !s.RequiredMet() {
		t.Fatal("RequiredMet = false with every required condition set and only a check failing")
	}
	disk.Store(nil)
	if code, _ := get("/readyz"); code != 200 {
		t.Fatalf("/readyz after the check passes again = %d", code)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "nodeld_test_things_total 1") {
		t.Fatalf("/metrics = %d %q", code, body)
	}
	code, body := get("/v1/status")
	var st map[string]string
	if code != 200 || json.Unmarshal([]byte(body), &st) != nil || st["node_id"] != "n-0123456789abcdef" {
		t.Fatalf("/v1/status = %d %q", code, body)
	}
	// Read-only: no method but GET is served.
	resp, err := http.Post(base+"/v1/status", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST /v1/status = %d, want 405", resp.StatusCode)
	}
	http.DefaultClient.CloseIdleConnections()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
}

func TestRunBindError(t *testing.T) {
	s1, _ := New(Config{Listen: "127.0.0.1:0"}, Deps{Gatherer: prometheus.NewRegistry(), Status: func() any { return nil }})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s1.Run(ctx) }()
	<-s1.Bound()
	s2, _ := New(Config{Listen: s1.Addr().String()}, Deps{Gatherer: prometheus.NewRegistry(), Status: func() any { return nil }})
	if err := s2.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "admin listen") {
		t.Fatalf("second bind = %v, want an admin listen error", err)
	}
	cancel()
	<-done
}

// The admin listener refuses requests a web page could make through DNS
// rebinding or cross-origin, as the role ports do: /v1/status names keys,
// peers, models and paths.
func TestRebindingGuard(t *testing.T) {
	s, err := New(Config{Listen: "127.0.0.1:0"}, Deps{
		Gatherer: prometheus.NewRegistry(),
		Status:   func() any { return map[string]string{"node_id": "n-0123456789abcdef"} },
		Logger:   zaptest.NewLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	<-s.Bound()
	addr := s.Addr().String()
	tests := []struct {
		name, path, host, origin string
		want                     int
	}{
		{"loopback host", "/v1/status", addr, "", http.StatusOK},
		{"localhost host", "/v1/status", "localhost", "", http.StatusOK},
		{"rebinding host on status", "/v1/status", "attacker.example:9464", "", http.StatusForbidden},
		{"rebinding host on metrics", "/metrics", "attacker.example", "", http.StatusForbidden},
		{"rebinding host on readyz", "/readyz", "attacker.example", "", http.StatusForbidden},
		{"cross origin", "/v1/status", addr, "http://attacker.example", http.StatusForbidden},
		{"null origin", "/v1/status", addr, "null", http.StatusForbidden},
		{"loopback origin", "/v1/status", addr, "http://" + addr, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, "http://"+addr+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = tt.host
			if tt.origin != "" {
				req.Header.Set("Origin", tt.origin)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Fatalf("GET %s with Host %q Origin %q = %d %q, want %d", tt.path, tt.host, tt.origin, resp.StatusCode, body, tt.want)
			}
			if tt.want == http.StatusForbidden && strings.Contains(string(body), "n-0123456789abcdef") {
				t.Errorf("a refused request leaked the status: %q", body)
			}
		})
	}
}

// admin.pprof: Go's profiles are 404 while off, served while on, behind
// the same loopback Host and Origin guard as every admin route, and a
// reload (SetPprof) turns them on and off without a restart.
func TestPprof(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(map[bool]string{false: "off", true: "on"}[on], func(t *testing.T) {
			s, err := New(Config{Listen: "127.0.0.1:0", Pprof: on}, Deps{
				Gatherer: prometheus.NewRegistry(),
				Status:   func() any { return nil },
				Logger:   zaptest.NewLogger(t),
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			defer func() {
				http.DefaultClient.CloseIdleConnections()
				cancel()
				if err := <-done; err != nil {
					t.Error(err)
				}
			}()
			<-s.Bound()
			addr := s.Addr().String()
			get := func(path, host, origin string) (int, string) {
				t.Helper()
				req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
				if err != nil {
					t.Fatal(err)
				}
				req.Host = host
				if origin != "" {
					req.Header.Set("Origin", origin)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			paths := []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=1", "/debug/pprof/symbol"}
			want := http.StatusNotFound
			if on {
				want = http.StatusOK
			}
			for _, path := range paths {
				if code, body := get(path, addr, ""); code != want {
					t.Errorf("GET %s with admin.pprof %t = %d %.80q, want %d", path, on, code, body, want)
				}
			}
			if code, body := get("/debug/pprof/goroutine?debug=1", addr, ""); on && !strings.Contains(body, "goroutine profile:") {
				t.Errorf("goroutine profile = %d %.80q", code, body)
			}
			// The guard runs first, on or off.
			if code, body := get("/debug/pprof/", "attacker.example", ""); code != http.StatusForbidden || strings.Contains(body, "goroutine") {
				t.Errorf("rebinding host = %d %.80q, want 403", code, body)
			}
			if code, _ := get("/debug/pprof/cmdline", addr, "http://attacker.example"); code != http.StatusForbidden {
				t.Errorf("cross origin = %d, want 403", code)
			}
			// A reload flips it; one that moves the listener is refused
			// and changes nothing.
			if _, err := s.Prepare(Config{Listen: "127.0.0.1:1", Pprof: !on}); !errors.Is(err, ErrListenChanged) {
				t.Errorf("Prepare with a new listen = %v, want ErrListenChanged", err)
			}
			if code, _ := get("/debug/pprof/", addr, ""); code != want {
				t.Errorf("after a refused reload: GET /debug/pprof/ = %d, want %d", code, want)
			}
			p, err := s.Prepare(Config{Listen: "127.0.0.1:0", Pprof: !on})
			if err != nil {
				t.Fatal(err)
			}
			if code, _ := get("/debug/pprof/", addr, ""); code != want {
				t.Errorf("before the commit: GET /debug/pprof/ = %d, want %d", code, want)
			}
			p.Commit()
			flipped := http.StatusOK
			if on {
				flipped = http.StatusNotFound
			}
			if code, _ := get("/debug/pprof/", addr, ""); code != flipped {
				t.Errorf("after a reload to pprof %t: GET /debug/pprof/ = %d, want %d", !on, code, flipped)
			}
		})
	}
}

// TestUIRoutes: with Deps.UI, /ui/ is the page's and / redirects to it;
// without, both are 404 as any unknown path.
func TestUIRoutes(t *testing.T) {
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ui "+r.URL.Path) })
	for _, withUI := range []bool{true, false} {
		deps := Deps{Gatherer: prometheus.NewRegistry(), Status: func() any { return nil }}
		if withUI {
			deps.UI = ui
		}
		s, err := New(Config{Listen: "127.0.0.1:0"}, deps)
		if err != nil {
			t.Fatal(err)
		}
		h := s.Handler()
		do := func(path string) *httptest.ResponseRecorder {
			req := httptest.NewRequest(http.MethodGet, path, nil)
			req.Host = "127.0.0.1:9464"
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			return w
		}
		root, page := do("/"), do("/ui/events")
		switch {
		case withUI && (root.Code != http.StatusFound || root.Header().Get("Location") != "/ui/" || page.Body.String() != "ui /ui/events"):
			t.Errorf("with the page: / = %d %q, /ui/events = %q", root.Code, root.Header().Get("Location"), page.Body)
		case !withUI && (root.Code != http.StatusNotFound || page.Code != http.StatusNotFound):
			t.Errorf("without the page: / = %d, /ui/events = %d, want 404", root.Code, page.Code)
		}
		if w := do("/healthz"); w.Code != 200 {
			t.Errorf("/healthz = %d", w.Code)
		}
	}
}
