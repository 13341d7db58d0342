package fleetui

import (
	"fmt"
	"html/template"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/nodeld/nodeld/internal/activity"
	"github.com/nodeld/nodeld/internal/operator"
)

// funcs are the templates' helpers: formatting only, no data access.
var funcs = template.FuncMap{
	"short": short,
	"bytes": func(n uint64) string { return operator.HumanBytes(n, " ") },
	"secs":  humanSeconds,
	"ms":    millis,
	"tps": func(v float64) string {
		if v <= 0 {
			return "-"
		}
		return strconv.FormatFloat(v, 'f', 1, 64)
	},
	"clock": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("15:04:05")
	},
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return humanSeconds(now.Sub(t).Seconds())
	},
	"state": stateClass,
	"chart": chart,
	"plus":  func(a, b int) int { return a + b },
	"less":  func(a, b int) bool { return a < b },
	"score": func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) },
}

// short is the first 12 characters of an id, as nodeld ctl prints them.
func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func humanSeconds(s float64) string {
	switch {
	case s < 0 || math.IsNaN(s):
		return "-"
	case s < 120:
		return strconv.Itoa(int(s)) + "s"
	case s < 2*3600:
		return strconv.Itoa(int(s/60)) + "m"
	case s < 2*86400:
		return strconv.Itoa(int(s/3600)) + "h"
	default:
		return strconv.Itoa(int(s/86400)) + "d"
	}
}

func millis(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
}

// stateClass maps a state word to one of the stylesheet's classes.
func stateClass(s string) string {
	switch s {
	case "alive", "placed", "running", "ready", "up", "connected", "local", "peer":
		return "ok"
	case "suspect", "dispatching", "unsettled", "starting", "pending", "idle", "cold", "rescheduled", "retiring", "waiting":
		return "warn"
	case "dead", "lost", "failed", "unplaceable", "down", "none", "stopped", "refused":
		return "bad"
	}
	return "plain"
}

// Chart geometry, in SVG user units.
const (
	chartW   = 600
	chartH   = 80
	chartPad = 2
)

// chart draws the requests per second as bars and the tokens per second
// as a line over the last seconds, each scaled to its own maximum. It is
// made of numbers only, so it is safe as HTML.
func chart(rates []activity.Second) template.HTML {
	var maxReq, maxTok int
	for _, s := range rates {
		maxReq, maxTok = max(maxReq, s.Requests), max(maxTok, s.Tokens)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="requests and tokens per second">`, chartW, chartH+chartPad)
	if n := len(rates); n > 0 {
		w := float64(chartW) / float64(n)
		for i, s := range rates {
			if s.Requests == 0 {
				continue
			}
			h := float64(chartH) * float64(s.Requests) / float64(maxReq)
			fmt.Fprintf(&b, `<rect class="req" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%d req/s</title></rect>`,
				float64(i)*w+0.5, float64(chartH)-h+chartPad, w-1, h, s.Requests)
		}
		if maxTok > 0 {
			b.WriteString(`<polyline class="tok" points="`)
			for i, s := range rates {
				y := float64(chartH) - float64(chartH)*float64(s.Tokens)/float64(maxTok) + chartPad
				fmt.Fprintf(&b, "%.1f,%.1f ", float64(i)*w+w/2, y)
			}
			b.WriteString(`"/>`)
		}
	}
	b.WriteString(`</svg>`)
	fmt.Fprintf(&b, `<p class="legend"><span class="req">&#9632;</span> requests/s (max %d) <span class="tok">&#9472;</span> tokens/s (max %d)</p>`, maxReq, maxTok)
	return template.HTML(b.String())
}
