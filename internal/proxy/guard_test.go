package proxy

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

func TestClassifyPath(t *testing.T) {
	tests := []struct {
		give       string
		wantClass  routeClass
		wantStatus int
	}{
		{"/v1/chat/completions", routeAny, 0},
		{"/v1/embeddings?x=1", routeAny, 0},
		{"/v1/models", routeAny, 0},
		{"/health", routeAny, 0},
		{"/api/tags", routeAny, 0},
		{"/api/chat", routeAny, 0},
		{"/api/ps", routeAny, 0},
		{"/v1/models/llama3:8b", routeLocalOnly, 0},
		{"/v1/models/a%20b", routeLocalOnly, 0},
		{"/v1/props", routeLocalOnly, 0},
		{"/api/pull", 0, 403},
		{"/api/push", 0, 403},
		{"/api/create", 0, 403},
		{"/api/blobs/sha256:abc", 0, 403},
		{"/api/unknown", 0, 404},
		{"/", 0, 404},
		{"/admin", 0, 404},
		{"/v1", 0, 404},
		{"", 0, 400},
		{"*", 0, 400},
		{"//evil.example/v1/x", 0, 400},
		{"http://evil.example/v1/x", 0, 400},
		{"/v1/../admin", 0, 400},
		{"/v1/..", 0, 400},
		{"/v1/./x", 0, 400},
		{"/v1/%2e%2e/admin", 0, 400},
		{"/v1/%2E%2E/admin", 0, 400},
		{"/v1/a%2fb", 0, 400},
		{"/v1/a%2Fb", 0, 400},
		{"/v1/a%5cb", 0, 400},
		{"/v1/a%00b", 0, 400},
		{"/v1/a\\b", 0, 400},
		{"/v1/a b", 0, 400},
		{"/v1/a\r\nX: y", 0, 400},
		{"/v1/models#frag", 0, 400},
		{"/v1/%6dodels", 0, 400},
		{"/v1/%zz", 0, 400},
		{"/v1/é", 0, 400},
		{"/v1/" + strings.Repeat("a", MaxPathBytes), 0, 400},
	}
	for _, tt := range tests {
		class, e := classifyPath(tt.give)
		status := 0
		if e != nil {
			status = e.Status
		}
		if class != tt.wantClass || status != tt.wantStatus {
			t.Errorf("classifyPath(%q) = %v, %d; want %v, %d", tt.give, class, status, tt.wantClass, tt.wantStatus)
		}
	}
}

func TestCheckAuthorityOrigin(t *testing.T) {
	tests := []struct {
		name    string
		origins []string
		want    bool
	}{
		{"absent", nil, true},
		{"localhost with port", []string{"http://localhost:3000"}, true},
		{"loopback ip", []string{"http://127.0.0.1"}, true},
		{"https", []string{"https://localhost"}, false},
		{"foreign", []string{"http://evil.example"}, false},
		{"null", []string{"null"}, false},
		{"empty", []string{""}, false},
		{"with path", []string{"http://localhost/x"}, false},
		{"two", []string{"http://localhost", "http://localhost"}, false},
	}
	for _, tt := range tests {
		r := &http.Request{Host: "localhost", Header: http.Header{}}
		if tt.origins != nil {
			r.Header["Origin"] = tt.origins
		}
		if got := checkAuthority(r) == nil; got != tt.want {
			t.Errorf("%s: allowed = %t, want %t", tt.name, got, tt.want)
		}
	}
}

func FuzzClassifyPath(f *testing.F) {
	for _, s := range []string{"/v1/chat/completions", "/v1/../x", "/v1/%2e", "//x", "/api/pull", "/v1/a%20b?q=1", "/v1/%41"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		class, e := classifyPath(target)
		if e != nil {
			if class != 0 {
				t.Fatalf("refused %q with class %v", target, class)
			}
			return
		}
		raw, _, _ := strings.Cut(target, "?")
		dec, err := url.PathUnescape(raw)
		if err != nil {
			t.Fatalf("accepted %q with a bad escape", target)
		}
		if strings.Contains(dec, "//") || strings.Contains(dec, "/../") || strings.HasSuffix(dec, "/..") ||
			strings.Contains(dec, "/./") || strings.ContainsAny(dec, "\\\x00") {
			t.Fatalf("accepted %q, which decodes to %q", target, dec)
		}
		if !strings.HasPrefix(raw, "/v1/") && !forwardedPathsBefore[raw] {
			t.Fatalf("accepted %q outside the allowlist", target)
		}
	})
}

// classifyPathBefore is classifyPath as it was before its checks shared
// one pass over the path: the reference its answers are compared with.
func classifyPathBefore(requestURI string) (routeClass, *Error) {
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
	case forwardedPathsBefore[raw]:
		return routeAny, nil
	case strings.HasPrefix(raw, "/v1/"):
		return routeLocalOnly, nil
	case managementPathsBefore[raw] || strings.HasPrefix(raw, "/api/blobs/"):
		return 0, &Error{Status: http.StatusForbidden, Type: TypePermission, Code: CodeForbiddenPath,
			Message: "forbidden: " + raw + " manages models, which a nodeld role port does not do: manage them on the model server itself"}
	default:
		return 0, &Error{Status: http.StatusNotFound, Type: TypeNotFound, Code: CodeNotFound,
			Message: "no route for " + raw}
	}
}

// forwardedPathsBefore and managementPathsBefore are classifyPathBefore's
// path sets.
var (
	forwardedPathsBefore = map[string]bool{
		"/v1/chat/completions": true, "/v1/completions": true, "/v1/embeddings": true, "/v1/models": true, "/health": true,
		"/api/generate": true, "/api/chat": true, "/api/embed": true, "/api/embeddings": true, "/api/tags": true,
		"/api/show": true, "/api/version": true, "/api/ps": true,
	}
	managementPathsBefore = map[string]bool{
		"/api/pull": true, "/api/delete": true, "/api/create": true, "/api/push": true, "/api/copy": true,
	}
)

// checkClassifyAsBefore fails when classifyPath answers target otherwise
// than classifyPathBefore: the same class, and the same refusal.
func checkClassifyAsBefore(t *testing.T, target string) {
	t.Helper()
	class, e := classifyPath(target)
	wantClass, wantE := classifyPathBefore(target)
	if class != wantClass || (e == nil) != (wantE == nil) || (e != nil && *e != *wantE) {
		t.Fatalf("classifyPath(%q) = %v, %+v; before, %v, %+v", target, class, e, wantClass, wantE)
	}
}

// TestClassifyPathAsBefore: paths of every fault, alone and together, in
// every order, are answered as before, refusal message included.
func TestClassifyPathAsBefore(t *testing.T) {
	parts := []string{"", "/", "//", "/.", "/..", "/./", "/../", "/v1", "/v1/", "/api", "/chat", "/completions",
		"%2e", "%2E", "%2f", "%5C", "%00", "%41", "%20", "%zz", "%", "...", "a.", ".a", "?", "?x=/../", "\\", "#"}
	var walk func(prefix string, depth int)
	walk = func(prefix string, depth int) {
		checkClassifyAsBefore(t, prefix)
		if depth == 0 {
			return
		}
		for _, p := range parts {
			walk(prefix+p, depth-1)
		}
	}
	walk("", 3)
	walk("/v1/", 3)
	for _, s := range []string{"/v1/chat/completions", "/v1/embeddings?x=1", "/api/blobs/sha256:abc", "/api/pull",
		"/v1/" + strings.Repeat("a", MaxPathBytes), "/api/", "/api/generat", "/api/generatex", "/healthz", "/Health"} {
		checkClassifyAsBefore(t, s)
	}
	for _, set := range []map[string]bool{forwardedPathsBefore, managementPathsBefore} {
		for path := range set {
			checkClassifyAsBefore(t, path)
			checkClassifyAsBefore(t, path+"/")
			checkClassifyAsBefore(t, path+"?stream=true")
			checkClassifyAsBefore(t, path[:len(path)-1])
		}
	}
}

func FuzzClassifyPathAsBefore(f *testing.F) {
	for _, s := range []string{"/v1/chat/completions", "/v1/../x", "/v1/%2e", "//x", "/api/pull", "/v1/a%20b?q=1", "/v1/%41", "/.//"} {
		f.Add(s)
	}
	f.Fuzz(checkClassifyAsBefore)
}

func BenchmarkClassifyPath(b *testing.B) {
	for b.Loop() {
		if class, e := classifyPath("/v1/chat/completions"); class != routeAny || e != nil {
			b.Fatal(class, e)
		}
	}
}

// TestPathSetsAsBefore: each path set, a switch, holds exactly the paths
// of the map it was.
func TestPathSetsAsBefore(t *testing.T) {
	before := map[string]struct {
		set  func(string) bool
		want map[string]bool
	}{
		"forwardedPath":  {forwardedPath, forwardedPathsBefore},
		"managementPath": {managementPath, managementPathsBefore},
		"pinnedPath": {pinnedPath, map[string]bool{
			"/v1/chat/completions": true, "/v1/completions": true, "/v1/embeddings": true,
			"/api/generate": true, "/api/chat": true, "/api/embed": true, "/api/embeddings": true,
		}},
		"meshPath": {meshPath, map[string]bool{
			"/v1/chat/completions": true, "/v1/completions": true, "/v1/embeddings": true, "/v1/models": true,
		}},
		"ollamaMeshPath": {ollamaMeshPath, map[string]bool{
			"/api/chat": true, "/api/generate": true, "/api/embed": true, "/api/embeddings": true,
		}},
	}
	var paths []string
	for _, b := range before {
		for p := range b.want {
			paths = append(paths, p, p+"/", p[:len(p)-1], strings.ToUpper(p), "/x"+p)
		}
	}
	paths = append(paths, "", "/", "/v1", "/v1/", "/api", "/api/")
	for name, b := range before {
		for _, p := range paths {
			if got := b.set(p); got != b.want[p] {
				t.Errorf("%s(%q) = %t, want %t", name, p, got, b.want[p])
			}
		}
	}
}
