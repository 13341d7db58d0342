package proxy

import (
	"net/http"
	"net/url"
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
		if !strings.HasPrefix(raw, "/v1/") && !forwardedPaths[raw] {
			t.Fatalf("accepted %q outside the allowlist", target)
		}
	})
}
