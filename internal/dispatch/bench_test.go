package dispatch

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/ctl"
)

// BenchmarkDescribeRoundTrip measures one signed describe over real QUIC
// on loopback, answered by a test-side ctl server: sign, fresh stream,
// verify on the far side, signed answer, verify here. It reports the p50
// and p99 latency in microseconds.
func BenchmarkDescribeRoundTrip(b *testing.B) {
	c := newCluster(b)
	c.far.set(describeHandler)
	ctx := context.Background()
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		if _, err := c.d.Call(ctx, "b", ctl.MethodDescribe, nil); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
}
