package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"

	"github.com/nodeld/nodeld/internal/grammar"
)

// Health is what a probe found.
type Health string

// Health values.
const (
	// HealthUp means the server answers and serves the model: the role may
	// be registered.
	HealthUp Health = "up"
	// HealthLoading means the server answers but is still loading its model.
	HealthLoading Health = "loading"
	// HealthDown means the server did not answer, or answered with an
	// unexpected status or body.
	HealthDown Health = "down"
	// HealthModelMissing means the server answers but does not list the
	// configured model (for Ollama: the model is not pulled, or no model is
	// configured and none is installed).
	HealthModelMissing Health = "model_missing"
	// HealthUnknown means the instance has not been probed yet.
	HealthUnknown Health = "unknown"
)

// ProbeResult is the outcome of one probe.
type ProbeResult struct {
	// Health is always set.
	Health Health
	// Model is the name the role is registered with when Health is up: the
	// configured model, else the one discovered from the server, else "" (the
	// client's request picks the model).
	Model string
}

// errLoading is returned with HealthLoading.
var errLoading = errors.New("server is loading its model")

// NewProbeClient returns the HTTP client probes use: every request bounded
// by timeout, no redirects (a 3xx is just a status that is not 200), no proxy
// from the environment, no connection reuse (a probe every few seconds gains
// nothing from pooling and must not keep sockets open between rounds), no
// transparent decompression, a bounded response header, and a dialer that
// refuses any non-loopback address. A timeout that is not positive means
// DefaultProbeTimeout.
func NewProbeClient(timeout time.Duration) *http.Client {
	if timeout <= 0 {
		timeout = DefaultProbeTimeout
	}
	dialer := &net.Dialer{
		Timeout: timeout,
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil || !grammar.IsLoopbackAddr(ap.Addr()) {
				return fmt.Errorf("%w: dial %s refused", ErrNotLoopback, address)
			}
			return nil
		},
	}
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:                  nil,
			DialContext:            dialer.DialContext,
			DisableKeepAlives:      true,
			DisableCompression:     true,
			MaxResponseHeaderBytes: maxProbeHeaderBytes,
			ResponseHeaderTimeout:  timeout,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// Probe asks the server of inst whether it is up, the way its runtime
// answers, and which model it serves. Only GET requests are sent.
//
//   - llama.cpp: GET /health; 200 is up, 503 whose body says "loading" is
//     loading, 404 falls back to GET /v1/models (older servers), anything
//     else is down. Once up, GET /v1/models lists the models; with no model
//     configured the first listed id is served, else /props is asked
//     (model_alias, else model_path).
//   - ollama: GET /api/version (200 up, 503 loading), then GET /api/tags.
//     With a model configured, up only if tags lists it (":latest"
//     tolerated), else model_missing. With none configured: no installed
//     model is model_missing; exactly one is up and served by that name;
//     several is up with no model (the client's request picks one, as
//     Ollama itself does).
//   - mlx-lm and openai: GET /v1/models; 200 with a valid list is up, 503 is
//     loading. With no model configured the first listed id is served.
//
// For every runtime but Ollama, a configured model that a non-empty list
// does not match (see modelMatches) is model_missing.
//
// Probe always returns a result with Health set; err is non-nil exactly
// when Health is not up, and says why. ctx bounds the whole probe.
func Probe(ctx context.Context, c *http.Client, inst AdoptedInstance) (ProbeResult, error) {
	ep, err := parseLoopbackURL(inst.URL)
	if err != nil {
		return ProbeResult{Health: HealthDown}, err
	}
	if c == nil {
		return ProbeResult{Health: HealthDown}, errors.New("probe: nil http client")
	}
	p := prober{c: c, base: ep.base}
	var res ProbeResult
	switch inst.Kind {
	case KindLlamaCpp:
		res, err = p.llamaCpp(ctx, inst.Model)
	case KindOllama:
		res, err = p.ollama(ctx, inst.Model)
	case KindMLXLM, KindOpenAI:
		res, err = p.openAI(ctx, inst.Model)
	default:
		return ProbeResult{Health: HealthUnknown}, fmt.Errorf("%w %q", ErrUnknownKind, inst.Kind)
	}
	if err != nil {
		return ProbeResult{Health: res.Health}, fmt.Errorf("probe %s %s: %w", inst.Kind, ep.base, err)
	}
	return res, nil
}

// prober sends one instance's probe requests.
type prober struct {
	c    *http.Client
	base string
}

// get sends GET base+path. The body is read (bounded) for 200 and 503
// answers only; other statuses are returned without it.
func (p prober) get(ctx context.Context, path string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+path, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("GET %s: %w", path, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := p.c.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("GET %s: %w", path, noAnswer(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusServiceUnavailable {
		return resp.StatusCode, nil, nil
	}
	body, err := readBounded(resp)
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("GET %s: %w", path, err)
	}
	return resp.StatusCode, body, nil
}

// readBounded reads at most maxProbeBodyBytes of resp.Body; a body that
// declares or carries more is an error.
func readBounded(resp *http.Response) ([]byte, error) {
	if resp.ContentLength > maxProbeBodyBytes {
		return nil, fmt.Errorf("body of %d bytes exceeds %d", resp.ContentLength, maxProbeBodyBytes)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxProbeBodyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read body: %w", noAnswer(err))
	}
	if len(body) > maxProbeBodyBytes {
		return nil, fmt.Errorf("body exceeds %d bytes", maxProbeBodyBytes)
	}
	return body, nil
}

// noAnswerError marks a probe that got no answer: its request timed out,
// or its connection failed other than by being refused (reset, cut mid
// body). On a loaded host that says nothing about the server's health, so
// the Adopter keeps an instance that is up until MissLimit such probes in a
// row (see "Missed probes" in the package documentation).
type noAnswerError struct{ err error }

func (e noAnswerError) Error() string { return e.err.Error() }
func (e noAnswerError) Unwrap() error { return e.err }

// noAnswer wraps a request's transport error as a noAnswerError unless it
// is an answer after all: a refused connection (nothing listens: the
// server is gone) or a dial nodeld refused itself.
func noAnswer(err error) error {
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, ErrNotLoopback) {
		return err
	}
	return noAnswerError{err}
}

// missed reports whether a probe's error says it got no answer (see
// noAnswerError), as opposed to an answer that the server is not up.
func missed(err error) bool {
	var e noAnswerError
	return errors.As(err, &e)
}

func down(err error) (ProbeResult, error) { return ProbeResult{Health: HealthDown}, err }

func (p prober) llamaCpp(ctx context.Context, model string) (ProbeResult, error) {
	status, body, err := p.get(ctx, "/health")
	if err != nil {
		return down(err)
	}
	var listBody []byte // /v1/models already fetched by the fallback
	switch status {
	case http.StatusOK:
	case http.StatusServiceUnavailable:
		if bytes.Contains(bytes.ToLower(body), []byte("loading")) {
			return ProbeResult{Health: HealthLoading}, fmt.Errorf("GET /health: %w", errLoading)
		}
		return down(fmt.Errorf("GET /health: HTTP %d", status))
	case http.StatusNotFound:
		var res ProbeResult
		if listBody, res, err = p.fetchUp(ctx, "/v1/models"); err != nil {
			return res, err
		}
	default:
		return down(fmt.Errorf("GET /health: HTTP %d", status))
	}

	// Up. The list is advisory for llama.cpp: /health is the authority, so a
	// missing or odd /v1/models only means nothing is learned from it.
	if listBody == nil {
		if st, b, err := p.get(ctx, "/v1/models"); err == nil && st == http.StatusOK {
			listBody = b
		}
	}
	var names []string
	if listBody != nil {
		names, _ = decodeModelList(listBody)
	}
	if res, decided, err := listedModel(model, names); decided {
		return res, err
	}
	if st, b, err := p.get(ctx, "/props"); err == nil && st == http.StatusOK {
		if name, err := decodeProps(b); err == nil {
			return ProbeResult{Health: HealthUp, Model: name}, nil
		}
	}
	return ProbeResult{Health: HealthUp}, nil
}

func (p prober) ollama(ctx context.Context, model string) (ProbeResult, error) {
	if _, res, err := p.fetchUp(ctx, "/api/version"); err != nil {
		return res, err
	}
	status, body, err := p.get(ctx, "/api/tags")
	switch {
	case err != nil:
		return down(err)
	case status != http.StatusOK:
		return down(fmt.Errorf("GET /api/tags: HTTP %d", status))
	}
	names, err := decodeOllamaTags(body)
	if err != nil {
		return down(fmt.Errorf("decode /api/tags: %w", err))
	}
	switch {
	case model != "":
		if !modelListed(model, names, ollamaMatches) {
			return ProbeResult{Health: HealthModelMissing}, fmt.Errorf("model %q is not pulled (the adopter never pulls)", model)
		}
		return ProbeResult{Health: HealthUp, Model: model}, nil
	case len(names) == 0:
		return ProbeResult{Health: HealthModelMissing}, errors.New("ollama lists no models")
	case len(names) == 1:
		return ProbeResult{Health: HealthUp, Model: names[0]}, nil
	default:
		return ProbeResult{Health: HealthUp}, nil
	}
}

func (p prober) openAI(ctx context.Context, model string) (ProbeResult, error) {
	body, res, err := p.fetchUp(ctx, "/v1/models")
	if err != nil {
		return res, err
	}
	names, err := decodeModelList(body)
	if err != nil {
		return down(fmt.Errorf("decode /v1/models: %w", err))
	}
	if res, decided, err := listedModel(model, names); decided {
		return res, err
	}
	return ProbeResult{Health: HealthUp}, nil
}

// fetchUp GETs path and returns its body when the server answers 200. A
// 503 is a server still loading; any other status, or no answer, is down:
// then err is set and res says which.
func (p prober) fetchUp(ctx context.Context, path string) (body []byte, res ProbeResult, err error) {
	status, body, err := p.get(ctx, path)
	switch {
	case err != nil:
		res, err = down(err)
		return nil, res, err
	case status == http.StatusServiceUnavailable:
		return nil, ProbeResult{Health: HealthLoading}, fmt.Errorf("GET %s: %w", path, errLoading)
	case status != http.StatusOK:
		res, err = down(fmt.Errorf("GET %s: HTTP %d", path, status))
		return nil, res, err
	}
	return body, ProbeResult{}, nil
}

// listedModel decides the served model of an up server from the models it
// lists: a configured model must be among them (when it lists any), and
// without one the first listed is served. decided is false when neither
// applies (no model configured, none listed).
func listedModel(model string, names []string) (res ProbeResult, decided bool, err error) {
	switch {
	case model != "":
		if len(names) > 0 && !modelListed(model, names, modelMatches) {
			return ProbeResult{Health: HealthModelMissing}, true, fmt.Errorf("model %q is not listed by the server", model)
		}
		return ProbeResult{Health: HealthUp, Model: model}, true, nil
	case len(names) > 0:
		return ProbeResult{Health: HealthUp, Model: names[0]}, true, nil
	}
	return ProbeResult{}, false, nil
}
