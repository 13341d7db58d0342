package meshproxy

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/chain/chaintest"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/proxy/proxytest"
)

// TestMeshRefusalFlood: a peer sending 1,000 requests for a role the
// serving node does not serve it, over a real mesh, leaves one entry and
// one summary in the serving node's real chain; a request it is served
// and an honest append in between go through.
func TestMeshRefusalFlood(t *testing.T) {
	rec := chaintest.New(t, chain.RecorderOptions{})
	up := proxytest.New(t, proxytest.Options{Model: "served-model"})
	a, b := pairNodes(t, up, Deps{Recorder: rec})

	const requests = 1000
	for i := range requests {
		req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1/v1/chat/completions", nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
		err = a.fwd.ForwardRemote(ctx, b.ID(), "not-served", req, []byte(chatBody(false)), &bufferedWriter{header: http.Header{}})
		cancel()
		if e, ok := asError(err); !ok || e.Code != CodePeerRefused {
			t.Fatalf("request %d for a role not served: %v, want %s", i, err, CodePeerRefused)
		}
		if i == requests/2 {
			if res, body := a.h.post("chat", "/v1/chat/completions", chatBody(false)); res.StatusCode != 200 {
				t.Fatalf("a served request during the flood: %d %s", res.StatusCode, body)
			}
			if _, err := rec.Chain.Append("nodeld", "node.honest", map[string]string{"during": "requests"}); err != nil {
				t.Fatalf("honest append during the flood: %v", err)
			}
		}
	}
	meshtest.WaitFor(t, "every refusal recorded", func() bool { return rec.Events(AuditKindMeshRefused) == requests })
	rec.Advance(time.Minute)
	rec.Flush(t)

	entries := rec.Entries(t)
	got := chaintest.Count(t, entries, AuditKindMeshRefused)
	key := chain.RecordKey{Sender: a.ID(), Kind: AuditKindMeshRefused, Reason: RefuseNotServed}
	if got.Chained != 1 || got.Summaries != 1 || got.ByKey[key] != requests-1 {
		t.Errorf("%d refusals left %d entries and %d summaries counting %v; want 1, 1 and %d under %+v",
			requests, got.Chained, got.Summaries, got.ByKey, requests-1, key)
	}
	if !chaintest.Has(entries, "node.honest", "requests") {
		t.Error("the honest entry appended during the flood is not in the chain")
	}
}
