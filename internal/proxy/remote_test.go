package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/table"
)

// remoteFunc is a RemoteForwarder made of a function.
type remoteFunc func(ctx context.Context, nodeID, role string, r *http.Request, body []byte, w http.ResponseWriter) error

func (f remoteFunc) ForwardRemote(ctx context.Context, nodeID, role string, r *http.Request, body []byte, w http.ResponseWriter) error {
	return f(ctx, nodeID, role, r, body, w)
}

var _ RemoteForwarder = remoteFunc(nil)

type remoteCall struct {
	NodeID, Role, Path, Body string
}

func TestRemoteForwarding(t *testing.T) {
	var mu sync.Mutex // guards calls
	var calls []remoteCall
	remote := remoteFunc(func(ctx context.Context, nodeID, role string, r *http.Request, body []byte, w http.ResponseWriter) error {
		mu.Lock()
		calls = append(calls, remoteCall{nodeID, role, r.URL.Path, string(body)})
		mu.Unlock()
		switch r.Header.Get("X-Test") {
		case "refused":
			return &Error{Status: http.StatusForbidden, Type: TypePermission, Code: "peer_refused", Message: "refused: peer"}
		case "fail":
			return errors.New("stream reset")
		case "cut":
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: part\n\n")
			return errors.New("stream reset")
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"from":"`+nodeID+`"}`)
		return nil
	})
	h := startProxy(t, Config{MeshMaxBodyBytes: 128}, Deps{Remote: remote})
	h.resolver.set("chat", table.Target{Kind: table.TargetRemote, NodeID: "node-b"})

	send := func(path, body, mode string) (*http.Response, []byte, error) {
		req, _ := http.NewRequest(http.MethodPost, h.url("chat")+path, strings.NewReader(body))
		req.Header.Set("X-Test", mode)
		res, err := h.client.Do(req)
		if err != nil {
			return nil, nil, err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return res, b, err
	}

	res, body, err := send("/v1/chat/completions", chatBody(false), "")
	if err != nil || res.StatusCode != 200 || string(body) != `{"from":"node-b"}` {
		t.Fatalf("ok: %v %v %s", err, res, body)
	}
	if got := res.Header.Get(RouteHeader); got != "node-b" {
		t.Errorf("%s = %q, want node-b", RouteHeader, got)
	}
	mu.Lock()
	want := []remoteCall{{"node-b", "chat", "/v1/chat/completions", chatBody(false)}}
	if diff := cmp.Diff(want, calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	mu.Unlock()

	tests := []struct {
		name, path, body, mode string
		wantStatus             int
		wantCode               string
	}{
		{"typed refusal", "/v1/chat/completions", "{}", "refused", 403, "peer_refused"},
		{"forwarder error", "/v1/chat/completions", "{}", "fail", 502, CodeUpstreamError},
		{"over mesh body limit", "/v1/chat/completions", strings.Repeat("x", 129), "", 413, CodeBodyTooLarge},
		{"local-only path", "/v1/props", "{}", "", 404, CodeLocalOnly},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, body, err := send(tt.path, tt.body, tt.mode)
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d (%s)", res.StatusCode, tt.wantStatus, body)
			}
			if got := apiError(t, res, body); got.Code != tt.wantCode {
				t.Errorf("code %q, want %q", got.Code, tt.wantCode)
			}
		})
	}

	res, body, err = send("/v1/chat/completions", chatBody(true), "cut")
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut stream: err %v body %q, want unexpected EOF", err, body)
	}
	_ = res
	meshtest.WaitFor(t, "remote 200 counted twice (ok and the cut stream)", func() bool {
		v, _ := metricValue(t, h.reg, "nodeld_proxy_requests_total", map[string]string{"role": "chat", "route": "remote", "code": "200"})
		return v == 2
	})
}
