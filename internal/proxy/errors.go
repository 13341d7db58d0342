package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Error types (the "type" field of an error body), following OpenAI's
// vocabulary where one fits.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypePermission     = "permission_error"
	TypeNotFound       = "not_found_error"
	TypeRateLimit      = "rate_limit_error"
	TypeUnavailable    = "service_unavailable_error"
	TypeUpstream       = "upstream_error"
	TypeTimeout        = "timeout_error"
)

// Error codes (the "code" field of an error body). They are stable strings
// callers may branch on; messages are for humans.
const (
	CodeBadPath          = "bad_path"
	CodeForbiddenPath    = "forbidden_path"
	CodeForbiddenHost    = "forbidden_host"
	CodeForbiddenOrigin  = "forbidden_origin"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeBodyTooLarge     = "body_too_large"
	CodeBodyTimeout      = "body_timeout"
	CodeOverCapacity     = "over_capacity"
	CodeNoInstance       = "no_instance"
	CodeMeshNotRunning   = "mesh_not_running"
	CodeLocalOnly        = "local_only_path"
	CodeUpstreamDown     = "upstream_unreachable"
	CodeUpstreamError    = "upstream_error"
	CodeUpstreamTimeout  = "upstream_timeout"
	CodeBadTarget        = "bad_target"
	// CodeModelLoading: the request was held for its role past its
	// max wait and nothing serves the role yet (503, Retry-After).
	CodeModelLoading = "model_loading"
	// CodeQueueFull: the role's queue of held requests is full (503,
	// Retry-After).
	CodeQueueFull = "queue_full"
)

// statusClientClosed is recorded in metrics when the client went away
// before a response head was sent (nginx's convention); it is never sent.
const statusClientClosed = 499

// Error is a refusal or failure answered to the client as an OpenAI-style
// JSON error (Ollama's shape on Ollama's paths: see writeError). A
// RemoteForwarder may return one (possibly wrapped) to choose the status
// and code the client sees; any other error it returns before writing a
// head becomes 502.
type Error struct {
	Status  int
	Type    string
	Code    string
	Message string
}

// Error returns the message with its status.
func (e *Error) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

// errorBody is the JSON shape of an error response.
type errorBody struct {
	Error errorFields `json:"error"`
}

type errorFields struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    string `json:"code"`
}

// ollamaErrorBody is the JSON shape of an error from Ollama's API: its
// clients read the "error" string and print it.
type ollamaErrorBody struct {
	Error string `json:"error"`
}

// writeError answers e to r as JSON in the shape of the API r speaks:
// Ollama's {"error":"<message>"} on its /api/ paths, OpenAI's everywhere
// else. Extra headers already set on w (Allow, X-Nodeld-Route) are kept.
func writeError(w http.ResponseWriter, r *http.Request, e *Error) {
	var v any = errorBody{Error: errorFields{Message: e.Message, Type: e.Type, Code: e.Code}}
	if isOllamaPath(r.URL.Path) {
		v = ollamaErrorBody{Error: e.Message}
	}
	b, err := json.Marshal(v)
	if err != nil {
		// Marshalling strings cannot fail; keep a valid body anyway.
		b = []byte(`{"error":"internal error"}`)
	}
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.Status)
	_, _ = w.Write(b) // the client may be gone; nothing else to do
}

func errBadPath(msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Code: CodeBadPath, Message: "bad request: " + msg}
}

func errNoInstance(role string) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: TypeUnavailable, Code: CodeNoInstance,
		Message: "no instance serves role '" + role + "'"}
}

// errNoInstanceRestarted is errNoInstance for a role whose only route led
// to a peer that restarted or stopped and did not link again within the
// mesh's restart wait, or whose new run does not serve the role.
func errNoInstanceRestarted(role string) *Error {
	e := errNoInstance(role)
	e.Message += ": its peer restarted or stopped and does not serve it again yet"
	return e
}

func errMeshNotRunning(role string) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: TypeUnavailable, Code: CodeMeshNotRunning,
		Message: "role '" + role + "' is served by a peer but the mesh is not running"}
}

// TooLargeError is the answer to a request body over limit bytes.
func TooLargeError(limit int64) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Type: TypeInvalidRequest, Code: CodeBodyTooLarge,
		Message: "request body over " + strconv.FormatInt(limit, 10) + " bytes"}
}

func errBodyTimeout(d time.Duration) *Error {
	return &Error{Status: http.StatusRequestTimeout, Type: TypeTimeout, Code: CodeBodyTimeout,
		Message: "request timeout: the request body did not arrive within " + d.String()}
}

// asError returns err's *Error if it wraps one.
func asError(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	return nil, false
}
