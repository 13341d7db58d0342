package fleetui

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/activity"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/operator"
)

// Bounds and timings of the page.
const (
	// MaxStreams bounds the /ui/events streams served at once; one more
	// is answered 503.
	MaxStreams = 8
	// PollInterval is how often a stream looks for a change.
	PollInterval = 500 * time.Millisecond
	// MaxQuiet is the longest a stream goes without an event: the node
	// section is sent at least this often, changed or not.
	MaxQuiet = time.Second
	// MaxActivityRows is how many recent requests the page lists.
	MaxActivityRows = 50
	// MaxLogBytes bounds each stream of an instance's logs served (the
	// host keeps at most host.MaxLogBytes).
	MaxLogBytes = 64 << 10
	// streamWriteTimeout bounds one event's write to a stream's client.
	streamWriteTimeout = 10 * time.Second
	// logsTimeout bounds one read of an instance's logs.
	logsTimeout = 5 * time.Second
)

// ContentSecurityPolicy is every page's policy: only this origin's
// scripts, styles, images and connections; no frames, forms or base.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

//go:embed assets
var assets embed.FS

// Source is what the page reads of the controller (*operator.Router).
type Source interface {
	Fleet() *operator.FleetDoc
	DecisionDetail(id string) (*operator.DecisionDetail, error)
	InstanceLogs(ctx context.Context, instanceID string) (*ctl.LogsResult, error)
}

var _ Source = (*operator.Router)(nil)

// Deps are what the page reads.
type Deps struct {
	// Status returns this node's /v1/status document; required.
	Status func() *operator.StatusDoc
	// Source is the operator read model; required.
	Source Source
	// Activity is this node's recent requests; nil shows none.
	Activity *activity.Log
	// Now is the clock (time.Now when nil).
	Now    func() time.Time
	Logger *zap.Logger
	// Registerer may be nil (metrics are kept but not exported).
	Registerer prometheus.Registerer
}

// UI serves the fleet page's routes.
type UI struct {
	deps    Deps
	log     *zap.Logger
	now     func() time.Time
	tmpl    *template.Template
	static  http.Handler
	streams atomic.Int64 // /ui/events streams being served
	metrics *metrics
}

// New checks deps and parses the page's templates.
func New(deps Deps) (*UI, error) {
	if deps.Status == nil || deps.Source == nil {
		return nil, errors.New("fleetui: Status and Source are required")
	}
	u := &UI{deps: deps, log: deps.Logger, now: deps.Now}
	if u.log == nil {
		u.log = zap.NewNop()
	}
	if u.now == nil {
		u.now = time.Now
	}
	tmpl, err := template.New("page").Funcs(funcs).ParseFS(assets, "assets/*.html")
	if err != nil {
		return nil, fmt.Errorf("fleetui templates: %w", err)
	}
	u.tmpl = tmpl
	if u.metrics, err = newMetrics(deps.Registerer); err != nil {
		return nil, err
	}
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	u.static = http.StripPrefix("/ui/assets/", http.FileServerFS(static))
	return u, nil
}

// Handler returns the page's routes, all under /ui/. It applies no Host
// or Origin guard: the admin server wraps every route in its own.
func (u *UI) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ui/{$}", u.page)
	mux.HandleFunc("GET /ui/data", u.data)
	mux.HandleFunc("GET /ui/events", u.events)
	mux.HandleFunc("GET /ui/logs/{id}", u.logs)
	mux.HandleFunc("GET /ui/decisions/{id}", u.decision)
	mux.HandleFunc("GET /ui/assets/{file}", func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.PathValue("file"), ".html") {
			http.NotFound(w, r) // templates are not assets
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		u.static.ServeHTTP(w, r)
	})
	return secure(mux)
}

// secure sets the headers every answer of the page carries.
func secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}

// Snapshot assembles the page's data now.
func (u *UI) Snapshot() *Data {
	now := u.now()
	d := newData(u.deps.Status(), u.deps.Source.Fleet(), now)
	if a := u.deps.Activity; a != nil {
		d.Activity = a.Recent(MaxActivityRows)
		d.Rates = a.Rates()
	}
	return d
}

func (u *UI) page(w http.ResponseWriter, r *http.Request) {
	var buf bytes.Buffer
	start := time.Now()
	err := u.tmpl.ExecuteTemplate(&buf, "page", u.Snapshot())
	u.metrics.render.Observe(time.Since(start).Seconds())
	if err != nil {
		u.log.Warn("fleet page render", zap.Error(err))
		http.Error(w, "page not rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(buf.Bytes())
}

func (u *UI) data(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	raw, err := json.Marshal(u.Snapshot())
	u.metrics.render.Observe(time.Since(start).Seconds())
	if err != nil {
		u.log.Warn("fleet data encode", zap.Error(err))
		http.Error(w, "data not encoded", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if _, err := w.Write(raw); err != nil {
		u.log.Debug("fleet data write", zap.Error(err))
	}
}

// sections are the parts of the page a stream replaces, each rendered by
// the template of its name, in the order they are sent.
var sections = []string{"node", "nodes", "declarations", "placements", "decisions", "activity", "instances"}

// render renders every section of d.
func (u *UI) render(d *Data) (map[string][]byte, error) {
	out := make(map[string][]byte, len(sections))
	for _, s := range sections {
		var buf bytes.Buffer
		if err := u.tmpl.ExecuteTemplate(&buf, s, d); err != nil {
			return nil, fmt.Errorf("section %s: %w", s, err)
		}
		out[s] = buf.Bytes()
	}
	return out, nil
}

// events streams the page's sections as server-sent events: each
// section's HTML when it changed, looked at every PollInterval, and the
// node section at least every MaxQuiet. It ends when the client goes or
// the server shuts down (the request's context).
func (u *UI) events(w http.ResponseWriter, r *http.Request) {
	if u.streams.Add(1) > MaxStreams {
		u.streams.Add(-1)
		u.metrics.streamsRefused.Inc()
		http.Error(w, fmt.Sprintf("at most %d fleet page streams at once", MaxStreams), http.StatusServiceUnavailable)
		return
	}
	u.metrics.streams.Inc()
	defer func() {
		u.streams.Add(-1)
		u.metrics.streams.Dec()
	}()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	sent := map[string][]byte{}
	var last time.Time
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	for {
		start := time.Now()
		secs, err := u.render(u.Snapshot())
		u.metrics.render.Observe(time.Since(start).Seconds())
		if err != nil {
			u.log.Warn("fleet page render", zap.Error(err))
			return
		}
		var buf bytes.Buffer
		quiet := time.Since(last) >= MaxQuiet // the stream's own pace, not the page's clock
		for _, s := range sections {
			if bytes.Equal(sent[s], secs[s]) && (!quiet || s != "node") {
				continue
			}
			writeEvent(&buf, s, secs[s])
			sent[s] = secs[s]
		}
		if buf.Len() > 0 {
			_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
			if _, err := w.Write(buf.Bytes()); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			last = time.Now()
		}
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
	}
}

// writeEvent writes one server-sent event: its name and data, one data
// line per line of data.
func writeEvent(buf *bytes.Buffer, name string, data []byte) {
	buf.WriteString("event: ")
	buf.WriteString(name)
	buf.WriteByte('\n')
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		buf.WriteString("data: ")
		buf.Write(bytes.TrimSuffix(line, []byte("\r")))
		buf.WriteByte('\n')
	}
	buf.WriteByte('\n')
}

// logs answers the last output of one of this node's placed instances as
// plain text, each stream cut to its last MaxLogBytes.
func (u *UI) logs(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), logsTimeout)
	defer cancel()
	res, err := u.deps.Source.InstanceLogs(ctx, r.PathValue("id"))
	switch {
	case errors.Is(err, operator.ErrNoInstance):
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	var b strings.Builder
	fmt.Fprintf(&b, "instance %s\n", res.InstanceID)
	if res.Note != "" {
		fmt.Fprintf(&b, "note: %s\n", res.Note)
	}
	if res.ExitCode != nil {
		fmt.Fprintf(&b, "last exit code: %d\n", *res.ExitCode)
	}
	if res.Truncated {
		b.WriteString("(older output cut)\n")
	}
	fmt.Fprintf(&b, "\n--- stdout ---\n%s\n--- stderr ---\n%s", tail(res.Stdout, MaxLogBytes), tail(res.Stderr, MaxLogBytes))
	_, _ = w.Write([]byte(b.String()))
}

// tail keeps the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// decision answers one decision's explanation as an HTML fragment (the
// page shows it under #d-<id>).
func (u *UI) decision(w http.ResponseWriter, r *http.Request) {
	det, err := u.deps.Source.DecisionDetail(r.PathValue("id"))
	switch {
	case errors.Is(err, operator.ErrNotExplained):
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	var buf bytes.Buffer
	if err := u.tmpl.ExecuteTemplate(&buf, "decision", det); err != nil {
		u.log.Warn("fleet decision render", zap.Error(err))
		http.Error(w, "decision not rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(buf.Bytes())
}
