package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"
)

// ollamaDriver is the driver of KindOllama: it drives an existing loopback
// Ollama daemon, never starts or signals it. A run is "the model is loaded
// by this instance".
type ollamaDriver struct {
	driverDeps
	model string // the tag to load
	base  string // the daemon's base URL

	// mu guards the fields below. It is never held across network I/O.
	mu sync.Mutex
	// loaded is true while the model is loaded by this instance; ownsLoad
	// is true when this instance asked for the load.
	loaded, ownsLoad bool
}

var _ driver = (*ollamaDriver)(nil)

// newOllamaDriver checks spec for ollama, reporting every problem at once.
func newOllamaDriver(spec Spec, deps driverDeps) (driver, error) {
	var errs []error
	if spec.Command != "" || len(spec.Args) > 0 || len(spec.Env) > 0 || spec.ModelFile != "" || spec.HealthPath != "" {
		errs = append(errs, errors.New("ollama takes no command, args, env, model file or health path: nodeld drives a running daemon"))
	}
	if spec.Model == "" {
		errs = append(errs, errors.New("ollama needs a model"))
	}
	raw := spec.URL
	if raw == "" {
		raw = DefaultOllamaURL
	}
	ep, err := parseLoopbackURL(raw)
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &ollamaDriver{driverDeps: deps, model: spec.Model, base: ep.base}, nil
}

// endpoint returns the daemon's URL, and whether the model is loaded by
// this instance.
func (d *ollamaDriver) endpoint() (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.base, d.loaded
}

// lastRun is nil: ollama runs no process.
func (d *ollamaDriver) lastRun() *procRun { return nil }

// ollamaGenerate is the body of the POST /api/generate that loads (keep
// alive -1: until told otherwise) or unloads (0) a model. An empty prompt
// generates nothing.
type ollamaGenerate struct {
	Model     string `json:"model"`
	Prompt    string `json:"prompt"`
	Stream    bool   `json:"stream"`
	KeepAlive int    `json:"keep_alive"`
}

// ollamaPinHorizon is how far ahead an expiry must lie for a model to
// count as pinned. A load with keep_alive -1 shows in /api/ps as expiring
// about 292 years ahead (Ollama's own CLI prints "Forever" beyond 20);
// one made by client traffic with Ollama's default keep_alive expires in
// 5 minutes (or OLLAMA_KEEP_ALIVE, hours at most in practice).
const ollamaPinHorizon = 365 * 24 * time.Hour

// pinned reports whether e stays loaded until told otherwise. An entry
// without an expiry says nothing, and is taken as pinned: nodeld does not
// act on what it cannot see.
func (d *ollamaDriver) pinned(e ollamaLoaded) bool {
	return e.ExpiresAt.IsZero() || e.ExpiresAt.Sub(d.now()) > ollamaPinHorizon
}

// start loads the model into the daemon with the pin (keep_alive -1). A
// model already resident and pinned is someone else's load: this
// instance does not own it and never unloads it. One resident but due to
// expire (loaded by client traffic) is pinned, which Ollama does without
// loading it again, and is then owned.
func (d *ollamaDriver) start(ctx context.Context) error {
	if e, found, err := d.ps(ctx); err == nil && found && d.pinned(e) {
		d.mu.Lock()
		d.loaded, d.ownsLoad = true, false
		d.mu.Unlock()
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, ollamaLoadTimeout)
	defer cancel()
	if err := d.generate(ctx, -1); err != nil {
		return fmt.Errorf("start: load %s into ollama: %w", d.model, err)
	}
	d.mu.Lock()
	d.loaded, d.ownsLoad = true, true
	d.mu.Unlock()
	d.log.Info("ollama model loaded", zap.String("model", d.model))
	return nil
}

// stop unloads the model if this instance loaded it, and ends the run
// either way. grace plays no part: the unload is bounded by ctx and
// DefaultStopGrace plus DefaultProbeTimeout.
func (d *ollamaDriver) stop(ctx context.Context, _ time.Duration) error {
	d.mu.Lock()
	loaded, owns := d.loaded, d.ownsLoad
	d.mu.Unlock()
	if !loaded {
		return nil
	}
	var err error
	if owns {
		ctx, cancel := context.WithTimeout(ctx, DefaultStopGrace+DefaultProbeTimeout)
		defer cancel()
		if err = d.generate(ctx, 0); err != nil {
			err = fmt.Errorf("stop: unload %s from ollama: %w", d.model, err)
		}
	}
	d.mu.Lock()
	d.loaded, d.ownsLoad = false, false
	d.mu.Unlock()
	d.ended(ExitStatus{Code: -1, Stopped: true, At: d.now()})
	return err
}

// generate posts a load or unload request. The client is the probe
// client (loopback only, no redirects) without its short timeout: ctx
// bounds the request. A refusal keeps Ollama's own error text
// ({"error":"model 'x' not found"}); a request that got no answer is a
// noAnswerError, as a probe's is.
func (d *ollamaDriver) generate(ctx context.Context, keepAlive int) error {
	body, err := json.Marshal(ollamaGenerate{Model: d.model, KeepAlive: keepAlive})
	if err != nil {
		return err
	}
	if len(body) > maxOllamaBodyBytes {
		return fmt.Errorf("request body exceeds %d bytes", maxOllamaBodyBytes)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.base+"/api/generate", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	c := *d.client
	c.Timeout = 0
	tr := c.Transport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = 0 // loading takes as long as it takes, within ctx
	c.Transport = tr
	defer tr.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("POST /api/generate: %w", noAnswer(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return statusError("POST /api/generate", resp)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxProbeBodyBytes))
	return nil
}

// ps returns the model's entry in GET /api/ps, and whether it is listed
// (resident).
func (d *ollamaDriver) ps(ctx context.Context) (ollamaLoaded, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, DefaultProbeTimeout)
	defer cancel()
	status, body, err := prober{c: d.client, base: d.base}.get(ctx, "/api/ps")
	if err != nil {
		return ollamaLoaded{}, false, err
	}
	if status != http.StatusOK {
		return ollamaLoaded{}, false, fmt.Errorf("GET /api/ps: HTTP %d", status)
	}
	loaded, err := decodeOllamaPS(body)
	if err != nil {
		return ollamaLoaded{}, false, fmt.Errorf("decode /api/ps: %w", err)
	}
	for _, e := range loaded {
		if ollamaMatches(d.model, e.Name) {
			return e, true, nil
		}
	}
	return ollamaLoaded{}, false, nil
}

// health is up while the model is loaded by this instance, resident in
// the daemon and pinned. A resident model due to expire lost its pin (the
// daemon restarted and client traffic loaded it again with Ollama's
// default keep_alive): it is pinned again here, which Ollama does without
// loading it again, and this instance owns the load from then on.
func (d *ollamaDriver) health(ctx context.Context) (Health, error) {
	d.mu.Lock()
	loaded := d.loaded
	d.mu.Unlock()
	if !loaded {
		return HealthDown, ErrNotRunning
	}
	e, found, err := d.ps(ctx)
	switch {
	case err != nil:
		return HealthDown, err
	case !found:
		return HealthDown, fmt.Errorf("model %s is not resident in ollama", d.model)
	case d.pinned(e):
		return HealthUp, nil
	}
	d.log.Warn("ollama model pin lost, pinning it again", zap.String("model", d.model),
		zap.Time("expires_at", e.ExpiresAt))
	if err := d.generate(ctx, -1); err != nil {
		return HealthDown, fmt.Errorf("pin %s again: %w", d.model, err)
	}
	d.mu.Lock()
	if d.loaded {
		d.ownsLoad = true
	}
	d.mu.Unlock()
	return HealthUp, nil
}
