package meshproxy

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The hot path's counts resolve their series once: after the first count
// of a label value, counting it again allocates nothing, and every count
// lands in its series.
func TestMeshMetricsCountWithoutAllocating(t *testing.T) {
	m, err := newMeshMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	count := func() {
		m.forwarded(fwdOK)
		m.transport(sideServe, TransportTCP)
		m.serve("chat", servedOK)
	}
	count()
	if n := testing.AllocsPerRun(100, count); n != 0 {
		t.Errorf("counting allocates %v times", n)
	}
	if got := testutil.ToFloat64(m.forwardsV.WithLabelValues(fwdOK)); got != 102 {
		t.Errorf("forwarded ok = %v, want 102", got)
	}
	if got := testutil.ToFloat64(m.transports.WithLabelValues(sideServe, TransportTCP)); got != 102 {
		t.Errorf("transport serve/tcp = %v, want 102", got)
	}
	if got := testutil.ToFloat64(m.served.WithLabelValues("chat", servedOK)); got != 102 {
		t.Errorf("served chat/ok = %v, want 102", got)
	}
	m.forwarded(fwdError)
	if got := testutil.ToFloat64(m.forwardsV.WithLabelValues(fwdError)); got != 1 {
		t.Errorf("forwarded error = %v, want 1", got)
	}
	// Each side and transport counts on its own series.
	for i, k := range [][2]string{{sideForward, TransportTCP}, {sideForward, TransportQUIC}, {sideServe, TransportQUIC}} {
		for range i + 1 {
			m.transport(k[0], k[1])
		}
		if got := testutil.ToFloat64(m.transports.WithLabelValues(k[0], k[1])); got != float64(i+1) {
			t.Errorf("transport %s/%s = %v, want %d", k[0], k[1], got, i+1)
		}
	}
	if got := testutil.ToFloat64(m.transports.WithLabelValues(sideServe, TransportTCP)); got != 102 {
		t.Errorf("transport serve/tcp = %v after the others, want 102", got)
	}
}
