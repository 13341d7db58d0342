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

// forwardedPath reports whether path is forwarded to local instances and
// to peers. A switch, as the other path sets: it finds a path in a few
// length and byte compares, where a map lookup hashes it first.
func forwardedPath(path string) bool {
	switch path {
	case "/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models", "/health",
		// Ollama's read and inference API.
		"/api/generate", "/api/chat", "/api/embed", "/api/embeddings", "/api/tags", "/api/show", "/api/version", "/api/ps":
		return true
	}
	return false
}

// managementPath reports whether path is of Ollama's management API:
// refused with 403, never forwarded.
func managementPath(path string) bool {
	switch path {
	case "/api/pull", "/api/delete", "/api/create", "/api/push", "/api/copy":
		return true
	}
	return false
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
	// One pass over the path's segments finds what the checks below
	// refuse, which then run in their order (a path with several faults
	// is refused for the first). Every encoding refused contains a '%':
	// a path without one, the common case, has none to look for.
	emptySeg, dotSeg, percent := false, false, false
	for i, seg := 1, 1; i <= len(raw); i++ {
		if i < len(raw) && raw[i] != '/' {
			percent = percent || raw[i] == '%'
			continue
		}
		switch raw[seg:i] {
		case "":
			emptySeg = emptySeg || i < len(raw) // "//"; not a final '/'
		case ".", "..":
			dotSeg = true
		}
		seg = i + 1
	}
	if emptySeg {
		return 0, errBadPath("path has an empty segment")
	}
	if percent {
		lower := strings.ToLower(raw)
		for _, bad := range []string{"%2e", "%2f", "%5c", "%00"} {
			if strings.Contains(lower, bad) {
				return 0, errBadPath("path has an encoded '.', '/', '\\' or NUL")
			}
		}
	}
	if dotSeg {
		return 0, errBadPath("path has a dot segment")
	}
	if percent {
		dec, err := url.PathUnescape(raw)
		if err != nil {
			return 0, errBadPath("path has a bad percent-encoding")
		}
		if (&url.URL{Path: dec}).EscapedPath() != raw {
			return 0, errBadPath("path is not in canonical form")
		}
	}
	switch {
	case forwardedPath(raw):
		return routeAny, nil
	case strings.HasPrefix(raw, "/v1/"):
		return routeLocalOnly, nil
	case managementPath(raw) || strings.HasPrefix(raw, "/api/blobs/"):
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
