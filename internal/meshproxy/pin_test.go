package meshproxy

import (
	"net/http"
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/proxy/proxytest"
)

// TestSameModelOnBothPaths is the case: a role served by node b
// to node a, a request naming another model. The instance receives the
// same pinned body whether the request came to b's own port (local path)
// or to a's (mesh path).
func TestSameModelOnBothPaths(t *testing.T) {
	up := proxytest.New(t, proxytest.Options{Model: "served-model"})
	a, b := pairNodes(t, up, Deps{})
	const body = `{"model":"another-model","messages":[{"role":"user","content":"hi"}]}`
	const want = `{"model":"served-model","messages":[{"role":"user","content":"hi"}]}`
	for _, n := range []*meshNode{b, a} {
		res, rb := n.h.post("chat", "/v1/chat/completions", body)
		if res.StatusCode != http.StatusOK || !strings.Contains(string(rb), "hello from served-model") {
			t.Fatalf("through %s: %d %s", n.Name, res.StatusCode, rb)
		}
		reqs := up.Requests()
		if got := string(reqs[len(reqs)-1].Body); got != want {
			t.Errorf("through %s the instance received %s, want %s", n.Name, got, want)
		}
	}
}
