package main

import (
	"time"

	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/proxy"
)

// proxyPerf hands the proxy's measurements of local instances to the
// signed facts, which must not import the proxy: the time to first byte
// in milliseconds and the tokens per second of each role, once each rests
// on facts.MinPerfSamples requests.
type proxyPerf struct{ p *proxy.Proxy }

var _ facts.PerfSource = proxyPerf{}

func (a proxyPerf) InferPerf() []facts.InferPerf {
	var out []facts.InferPerf
	for _, rp := range a.p.LocalPerf(facts.MinPerfSamples) {
		if rp.TTFBSamples >= facts.MinPerfSamples {
			out = append(out, facts.InferPerf{Role: rp.Role, Metric: grammar.PerfMetricTTFBMillis,
				Value: float64(rp.TTFB) / float64(time.Millisecond), Samples: rp.TTFBSamples})
		}
		if rp.TokensSamples >= facts.MinPerfSamples {
			out = append(out, facts.InferPerf{Role: rp.Role, Metric: grammar.PerfMetricTokensPerSecond,
				Value: rp.TokensPerSecond, Samples: rp.TokensSamples})
		}
	}
	return out
}
