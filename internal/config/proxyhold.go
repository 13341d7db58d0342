package config

import (
	"time"

	"github.com/nodeld/nodeld/internal/holdq"
)

// Proxy configures the loopback proxy beyond inference.limits.
type Proxy struct {
	Hold ProxyHold `yaml:"hold"`
}

// ProxyHold is how a request for a role with no live route, expected back
// (served here within Remember), waits for one instead of being refused.
type ProxyHold struct {
	// MaxWait is the longest a request waits; past it, 503 model_loading.
	// 0 holds nothing: 503 no_instance at once, as before holding.
	MaxWait Duration `yaml:"max_wait"`
	// Queue bounds the requests held per role; one more gets 503
	// queue_full at once.
	Queue int `yaml:"queue"`
	// Keepalive is the interval of the SSE comment lines a held
	// streaming request gets while it waits.
	Keepalive Duration `yaml:"keepalive"`
	// Remember is how long a role that had a live route here stays
	// expected back after it lost it.
	Remember Duration `yaml:"remember"`
}

// Bounds of proxy.hold: the hold's own (internal/holdq), named once.
const (
	MaxHoldWait      = holdq.MaxWait
	MaxHoldQueue     = holdq.MaxQueue
	MaxHoldKeepalive = holdq.MaxKeepalive
	MaxHoldRemember  = holdq.MaxRemember
)

// defaultProxy is the proxy section's defaults.
func defaultProxy() Proxy {
	return Proxy{Hold: ProxyHold{
		MaxWait:   Duration{D: 30 * time.Second},
		Queue:     holdq.DefaultQueue,
		Keepalive: Duration{D: holdq.DefaultKeepalive},
		Remember:  Duration{D: holdq.DefaultRemember},
	}}
}

func (v *validator) proxy() {
	h := v.c.Proxy.Hold
	switch {
	case !h.MaxWait.Valid():
		v.addf("proxy.hold.max_wait", "invalid duration %q: use a Go duration such as 500ms, 15s or 5m", h.MaxWait.raw)
	case h.MaxWait.D < 0:
		v.addf("proxy.hold.max_wait", "must not be negative, got %s (0 turns holding off)", h.MaxWait.D)
	default:
		v.atMost("proxy.hold.max_wait", h.MaxWait, MaxHoldWait)
	}
	v.intRange("proxy.hold.queue", int64(h.Queue), MaxHoldQueue)
	v.positive("proxy.hold.keepalive", h.Keepalive)
	v.atMost("proxy.hold.keepalive", h.Keepalive, MaxHoldKeepalive)
	v.positive("proxy.hold.remember", h.Remember)
	v.atMost("proxy.hold.remember", h.Remember, MaxHoldRemember)
}
