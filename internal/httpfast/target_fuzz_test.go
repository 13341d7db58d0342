package httpfast

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// FuzzRequestTarget: the target forwarded upstream is built from the
// client's. For any target without a control byte or space (what both
// servers admit), what is forwarded has none either, so it cannot split
// the upstream request line, keeps the path, and is the client's own when
// its query parses.
func FuzzRequestTarget(f *testing.F) {
	f.Add("/v1/chat/completions")
	f.Add("/v1/models?limit=2&after=x")
	f.Add("/v1/models?a=%zz&b=2")
	f.Add("/v1/models?a;b=c&d=e")
	f.Add("/p?")
	f.Add("/p?%")
	f.Add("/p?a=%0d%0aHost:%20evil")
	f.Add("/p?&&=&")
	f.Fuzz(func(t *testing.T, target string) {
		for i := 0; i < len(target); i++ {
			if c := target[i]; c <= ' ' || c == 0x7f {
				return
			}
		}
		got := requestTarget(&http.Request{RequestURI: target})
		for i := 0; i < len(got); i++ {
			if c := got[i]; c <= ' ' || c == 0x7f {
				t.Fatalf("requestTarget(%q) = %q: byte %#x", target, got, c)
			}
		}
		path, query, _ := strings.Cut(target, "?")
		if _, err := url.ParseQuery(query); err == nil && !strings.Contains(query, ";") && got != target {
			t.Fatalf("requestTarget(%q) = %q: a query that parses was rewritten", target, got)
		}
		if p, _, _ := strings.Cut(got, "?"); p != path {
			t.Fatalf("requestTarget(%q) = %q: path changed", target, got)
		}
		if len(got) > len(target)*3 {
			t.Fatalf("requestTarget(%q) = %q: grew past re-encoding", target, got)
		}
	})
}
