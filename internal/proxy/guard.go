package proxy

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/nodeld/nodeld/internal/grammar"
)

// routeClass says how a request path may be forwarded.
type routeClass int

const (
	// routeAny may go to a local instance or to a peer.
	routeAny routeClass = iota + 1
	// routeLocalOnly goes to a local instance only (other /v1/... paths,
	// whose semantics the mesh does not know).
	routeLocalOnly
)

// Paths forwarded to local instances and to peers.
var forwardedPaths = map[string]bool{
	"/v1/chat/completions": true,
	"/v1/completions":      true,
	"/v1/embeddings":       true,
	"/v1/models":           true,
	"/health":              true,
	// Ollama's read and inference API.
	"/api/generate":   true,
	"/api/chat":       true,
	"/api/embed":      true,
	"/api/embeddings": true,
	"/api/tags":       true,
	"/api/show":       true,
	"/api/version":    true,
	"/api/ps":         true,
}

// Ollama's management API: refused with 403, never forwarded.
var managementPaths = map[string]bool{
	"/api/pull":   true,
	"/api/delete": true,
	"/api/create": true,
	"/api/push":   true,
	"/api/copy":   true,
}

// checkMethod refuses anything but GET and POST.
func checkMethod(r *http.Request) *Error {
	if r.Method == http.MethodGet || r.Method == http.MethodPost {
		return nil
	}
	return &Error{Status: http.StatusMethodNotAllowed, Type: TypeInvalidRequest, Code: CodeMethodNotAllowed,
		Message: "method " + r.Method + " not allowed: use GET or POST"}
}

// classifyPath checks the raw request target and says how it may be
// forwarded. The target must be in canonical origin form: it starts with
// one '/', has no empty, "." or ".." segment, no backslash, control byte,
// space or fragment, no percent-encoded '.', '/', '\' or NUL, and its
// percent-encoding is exactly the one Go itself would produce (so there is
// one spelling per path and what is checked is what is forwarded).
// Malformed targets are 400, Ollama management paths 403, unknown paths 404.
func classifyPath(requestURI string) (routeClass, *Error) {
	if len(requestURI) > MaxPathBytes {
		return 0, errBadPath("request target longer than " + strconv.Itoa(MaxPathBytes) + " bytes")
	}
	raw, _, _ := strings.Cut(requestURI, "?")
	if !strings.HasPrefix(raw, "/") {
		return 0, errBadPath("request target must be an absolute path")
	}
	for i := 0; i < len(requestURI); i++ {
		c := requestURI[i]
		if c <= 0x20 || c >= 0x7f || c == '\\' || c == '#' {
			return 0, errBadPath("request target has a forbidden character")
		}
	}
	if strings.Contains(raw, "//") {
		return 0, errBadPath("path has an empty segment")
	}
	lower := strings.ToLower(raw)
	for _, bad := range []string{"%2e", "%2f", "%5c", "%00"} {
		if strings.Contains(lower, bad) {
			return 0, errBadPath("path has an encoded '.', '/', '\\' or NUL")
		}
	}
	for seg := range strings.SplitSeq(raw[1:], "/") {
		if seg == "." || seg == ".." {
			return 0, errBadPath("path has a dot segment")
		}
	}
	if strings.IndexByte(raw, '%') >= 0 {
		dec, err := url.PathUnescape(raw)
		if err != nil {
			return 0, errBadPath("path has a bad percent-encoding")
		}
		if (&url.URL{Path: dec}).EscapedPath() != raw {
			return 0, errBadPath("path is not in canonical form")
		}
	}
	switch {
	case forwardedPaths[raw]:
		return routeAny, nil
	case strings.HasPrefix(raw, "/v1/"):
		return routeLocalOnly, nil
	case managementPaths[raw] || strings.HasPrefix(raw, "/api/blobs/"):
		return 0, &Error{Status: http.StatusForbidden, Type: TypePermission, Code: CodeForbiddenPath,
			Message: "forbidden: " + raw + " manages models, which a nodeld role port does not do: manage them on the model server itself"}
	default:
		return 0, &Error{Status: http.StatusNotFound, Type: TypeNotFound, Code: CodeNotFound,
			Message: "no route for " + raw}
	}
}

// checkAuthority is the DNS-rebinding and cross-origin guard: Host must be
// a loopback host and a present Origin must be http://<loopback host>.
func checkAuthority(r *http.Request) *Error {
	origins, present := r.Header["Origin"]
	switch grammar.CheckLoopbackRequest(r.Host, origins, present) {
	case nil:
		return nil
	case grammar.ErrForbiddenHost:
		return &Error{Status: http.StatusForbidden, Type: TypePermission, Code: CodeForbiddenHost,
			Message: grammar.ErrForbiddenHost.Error()}
	default:
		return &Error{Status: http.StatusForbidden, Type: TypePermission, Code: CodeForbiddenOrigin,
			Message: grammar.ErrForbiddenOrigin.Error()}
	}
}
