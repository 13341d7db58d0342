package meshproxy

import (
	"net/http"
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/proxy"
	"github.com/nodeld/nodeld/internal/proxy/proxytest"
)

// upstreamWithHeader is an upstream whose every response carries an
// X-Pad header of n bytes.
func upstreamWithHeader(t *testing.T, n int) *proxytest.Upstream {
	return proxytest.New(t, proxytest.Options{Model: "served-model",
		Header: http.Header{"X-Pad": {strings.Repeat("a", n)}}})
}

// TestUpstreamHeadBounded checks that a local instance's response head over
// MaxUpstreamHeaderBytes is answered 502 on the role port, on both the
// local path and the mesh path (the serving node's transport), while a
// head well under the bound is relayed.
func TestUpstreamHeadBounded(t *testing.T) {
	const small = 16 << 10
	paths := []struct {
		name  string
		start func(t *testing.T, up *proxytest.Upstream) *harness
	}{
		{"local", func(t *testing.T, up *proxytest.Upstream) *harness {
			h := startProxy(t, proxy.Config{}, proxy.Deps{})
			h.resolver.local("chat", up.URL)
			return h
		}},
		{"mesh", func(t *testing.T, up *proxytest.Upstream) *harness {
			a, _ := pairNodes(t, up, Deps{})
			return a.h
		}},
	}
	for _, pt := range paths {
		t.Run(pt.name, func(t *testing.T) {
			t.Run("1 MiB of headers", func(t *testing.T) {
				up := upstreamWithHeader(t, 1<<20)
				h := pt.start(t, up)
				res, body := h.post("chat", "/v1/chat/completions", chatBody(false))
				if res.StatusCode != http.StatusBadGateway {
					t.Fatalf("status %d, want 502 (body %.200s)", res.StatusCode, body)
				}
				if got := apiError(t, res, body); got.Code != proxy.CodeUpstreamError {
					t.Errorf("code %q, want %q", got.Code, proxy.CodeUpstreamError)
				}
				if v := res.Header.Get("X-Pad"); v != "" {
					t.Errorf("X-Pad of %d bytes relayed", len(v))
				}
				if up.Count() != 1 {
					t.Errorf("upstream saw %d requests, want 1", up.Count())
				}
			})
			t.Run("16 KiB of headers", func(t *testing.T) {
				up := upstreamWithHeader(t, small)
				h := pt.start(t, up)
				res, body := h.post("chat", "/v1/chat/completions", chatBody(false))
				if res.StatusCode != http.StatusOK || !strings.Contains(string(body), "hello from served-model") {
					t.Fatalf("status %d, body %.200s", res.StatusCode, body)
				}
				// The mesh relays only Content-Type and Cache-Control.
				if pt.name == "local" && len(res.Header.Get("X-Pad")) != small {
					t.Errorf("X-Pad of %d bytes, want %d", len(res.Header.Get("X-Pad")), small)
				}
			})
		})
	}
}
