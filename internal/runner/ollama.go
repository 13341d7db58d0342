package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"go.uber.org/zap"
)

// ollamaGenerate is the body of the POST /api/generate that loads (keep
// alive -1: until told otherwise) or unloads (0) a model. An empty prompt
// generates nothing.
type ollamaGenerate struct {
	Model     string `json:"model"`
	Prompt    string `json:"prompt"`
	Stream    bool   `json:"stream"`
	KeepAlive int    `json:"keep_alive"`
}

// ollamaLoad loads the model into the daemon unless it is already resident,
// in which case this instance does not own the load and never unloads it.
func (m *Managed) ollamaLoad(ctx context.Context) error {
	if resident, err := m.ollamaResident(ctx); err == nil && resident {
		m.mu.Lock()
		m.loaded, m.ownsLoad = true, false
		m.mu.Unlock()
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, ollamaLoadTimeout)
	defer cancel()
	if err := m.ollamaGenerate(ctx, -1); err != nil {
		return fmt.Errorf("start: load %s into ollama: %w", m.spec.Model, err)
	}
	m.mu.Lock()
	m.loaded, m.ownsLoad = true, true
	m.mu.Unlock()
	m.log.Info("ollama model loaded", zap.String("model", m.spec.Model))
	return nil
}

// ollamaUnload unloads the model if this instance loaded it, and ends the
// run either way.
func (m *Managed) ollamaUnload(ctx context.Context) error {
	m.mu.Lock()
	loaded, owns := m.loaded, m.ownsLoad
	m.mu.Unlock()
	if !loaded {
		return nil
	}
	var err error
	if owns {
		ctx, cancel := context.WithTimeout(ctx, DefaultStopGrace+DefaultProbeTimeout)
		defer cancel()
		if err = m.ollamaGenerate(ctx, 0); err != nil {
			err = fmt.Errorf("stop: unload %s from ollama: %w", m.spec.Model, err)
		}
	}
	m.mu.Lock()
	m.loaded, m.ownsLoad = false, false
	m.mu.Unlock()
	m.ended(ExitStatus{Code: -1, Stopped: true, At: m.now()})
	return err
}

// ollamaGenerate posts a load or unload request. The client is the probe
// client (loopback only, no redirects) without its short timeout: ctx
// bounds the request.
func (m *Managed) ollamaGenerate(ctx context.Context, keepAlive int) error {
	body, err := json.Marshal(ollamaGenerate{Model: m.spec.Model, KeepAlive: keepAlive})
	if err != nil {
		return err
	}
	if len(body) > maxOllamaBodyBytes {
		return fmt.Errorf("request body exceeds %d bytes", maxOllamaBodyBytes)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.base+"/api/generate", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	c := *m.client
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

// ollamaResident reports whether GET /api/ps lists the model.
func (m *Managed) ollamaResident(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, DefaultProbeTimeout)
	defer cancel()
	status, body, err := prober{c: m.client, base: m.base}.get(ctx, "/api/ps")
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
	return modelListed(m.spec.Model, names, ollamaMatches), nil
}

// ollamaHealth is up while the model is loaded by this instance and
// resident in the daemon.
func (m *Managed) ollamaHealth(ctx context.Context) (Health, error) {
	m.mu.Lock()
	loaded := m.loaded
	m.mu.Unlock()
	if !loaded {
		return HealthDown, ErrNotRunning
	}
	resident, err := m.ollamaResident(ctx)
	switch {
	case err != nil:
		return HealthDown, err
	case !resident:
		return HealthDown, fmt.Errorf("model %s is not resident in ollama", m.spec.Model)
	}
	return HealthUp, nil
}
