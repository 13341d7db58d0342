package host

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
)

// TestStatusReportsActivity: the signed status a controller reads carries
// each inference instance's activity (issue 24: idle unload never with a
// request in flight, idle_after from the last request): none before a
// request, the last request's time once one is answered, kept across a
// restart of the instance (which registers its role anew).
func TestStatusReportsActivity(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	id, _ := c.placeRunning(t, buildEcho(t, c.publisher))
	activity := func() ctl.InstanceActivity {
		t.Helper()
		var st ctl.InstanceStatus
		c.mustCall(t, ctl.MethodStatus, ctl.InstanceParams{InstanceID: id}, "", &st)
		if st.Activity == nil {
			t.Fatalf("status of an inference instance without activity: %+v", st)
		}
		return *st.Activity
	}
	if a := activity(); a != (ctl.InstanceActivity{}) {
		t.Fatalf("before any request: %+v", a)
	}

	before := time.Now()
	front := newRoleFront(t, c.hostNode.Table)
	res, err := http.Post(front+"/v1/chat/completions", "application/json", strings.NewReader(`{"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), "echo: hi") {
		t.Fatalf("%d %s", res.StatusCode, body)
	}
	var a ctl.InstanceActivity
	meshtest.WaitFor(t, "the request no longer in flight", func() bool { a = activity(); return a.InFlight == 0 && !a.LastRequest.IsZero() })
	if a.LastRequest.Before(before) {
		t.Fatalf("last request %v, before the request was sent at %v", a.LastRequest, before)
	}

	c.stop(t, id)
	c.mustCall(t, ctl.MethodStart, ctl.InstanceParams{InstanceID: id}, newDecision(), nil)
	c.waitRegistered(t, c.endpoint(t, id))
	if got := activity(); !got.LastRequest.Equal(a.LastRequest) || got.InFlight != 0 {
		t.Errorf("after a restart: %+v, want the last request kept at %v", got, a.LastRequest)
	}
}
