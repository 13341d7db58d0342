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

// start loads the model into the daemon unless it is already resident, in
// which case this instance does not own the load and never unloads it.
func (d *ollamaDriver) start(ctx context.Context) error {
	if resident, err := d.resident(ctx); err == nil && resident {
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
// bounds the request.
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
		return fmt.Errorf("POST /api/generate: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxProbeBodyBytes))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST /api/generate: HTTP %d", resp.StatusCode)
	}
	return nil
}

// resident reports whether GET /api/ps lists the model.
func (d *ollamaDriver) resident(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, DefaultProbeTimeout)
	defer cancel()
	status, body, err := prober{c: d.client, base: d.base}.get(ctx, "/api/ps")
	if err != nil {
		return false, err
	}
	if status != http.StatusOK {
		return false, fmt.Errorf("GET /api/ps: HTTP %d", status)
	}
	names, err := decodeOllamaTags(body) // same shape: models[].name
	if err != nil {
		return false, fmt.Errorf("decode /api/ps: %w", err)
	}
	return modelListed(d.model, names, ollamaMatches), nil
}

// health is up while the model is loaded by this instance and resident in
// the daemon.
func (d *ollamaDriver) health(ctx context.Context) (Health, error) {
	d.mu.Lock()
	loaded := d.loaded
	d.mu.Unlock()
	if !loaded {
		return HealthDown, ErrNotRunning
	}
	resident, err := d.resident(ctx)
	switch {
	case err != nil:
		return HealthDown, err
	case !resident:
		return HealthDown, fmt.Errorf("model %s is not resident in ollama", d.model)
	}
	return HealthUp, nil
}
