package meshproxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/mesh"
)

// frameJSON returns the payload of the one frame in b.
func framePayload(t *testing.T, b []byte, want mesh.FrameType) []byte {
	t.Helper()
	typ, n, err := mesh.ReadFrameHeader(bytes.NewReader(b), 0)
	if err != nil || typ != want || n != len(b)-mesh.FrameHeaderSize {
		t.Fatalf("frame %#x of %d bytes (%v) in %d bytes, want one %#x frame", typ, n, err, len(b), want)
	}
	return b[mesh.FrameHeaderSize:]
}

// Heads written by hand are what json.Marshal would say, and the fast
// parser reads them back.
func TestHeadsRoundTrip(t *testing.T) {
	for _, h := range []meshRequestHead{
		{V: 1, Role: "chat", Method: "POST", Path: "/v1/chat/completions", BodyBytes: 12},
		{V: 1, Role: "r.1_x-y", Method: "GET", Path: "/v1/models", Query: "a=b&c=%22", ContentType: "application/json; charset=utf-8",
			Accept: "text/event-stream\t, */*", BodyBytes: -1},
		{V: 7, Role: `q"\`, Method: "POST", Path: "/api/chat", ContentType: "x\x01", BodyBytes: 0},
	} {
		payload := framePayload(t, appendRequestHeadFrame(nil, h), frameReqHead)
		var viaJSON meshRequestHead
		if err := decodeStrict(payload, &viaJSON); err != nil {
			t.Fatalf("%s: %v", payload, err)
		}
		if diff := cmp.Diff(h, viaJSON); diff != "" {
			t.Errorf("encoding/json reads %s as (-want +got):\n%s", payload, diff)
		}
		fast, ok := parseRequestHeadFast(payload, "")
		escaped := !json.Valid([]byte(`"`+h.Role+h.ContentType+h.Accept+`"`)) || h.Role == `q"\`
		if ok == escaped || (ok && !cmp.Equal(h, fast)) { // escapes go to encoding/json
			t.Errorf("fast parser on %s: %+v, %v", payload, fast, ok)
		}
	}
	hdr := http.Header{"Content-Type": {"text/event-stream"}, "Content-Length": {"12"}, "Set-Cookie": {"x"}, "Cache-Control": {"bad\r\nvalue"}}
	b, ct := appendResponseHeadFrame(nil, 201, hdr)
	payload := framePayload(t, b, frameRespHead)
	want := meshResponseHead{V: MeshWireVersion, Status: 201, Headers: map[string]string{"Content-Type": "text/event-stream", "Content-Length": "12"}}
	var viaJSON meshResponseHead
	if err := decodeStrict(payload, &viaJSON); err != nil {
		t.Fatal(err)
	}
	fast, ok := parseResponseHeadFast(payload)
	wantFast := responseHead{V: MeshWireVersion, Status: 201, Headers: relayedHeaders{hdrContentType: "text/event-stream", hdrContentLength: "12"}}
	if ct != "text/event-stream" || !ok || !cmp.Equal(want, viaJSON) || fast != wantFast {
		t.Errorf("response head %s: content type %q, encoding/json %+v, fast %+v %v; want %+v", payload, ct, viaJSON, fast, ok, want)
	}
	b, _ = appendResponseHeadFrame(nil, 204, http.Header{})
	if got := string(framePayload(t, b, frameRespHead)); got != `{"v":1,"status":204}` {
		t.Errorf("head without headers = %s", got)
	}
}

// The fast parsers accept only heads that encoding/json decodes, strictly,
// to the same value: they change nothing in what a peer may send.
func FuzzHeadFastPath(f *testing.F) {
	f.Add([]byte(`{"v":1,"role":"chat","method":"POST","path":"/v1/chat/completions","content_type":"application/json","body_bytes":93}`))
	f.Add([]byte(`{"v":1,"role":"chat","method":"GET","path":"/v1/models","query":"a","accept":"*/*","body_bytes":-1}`))
	f.Add([]byte(`{"v":1,"status":200,"headers":{"Content-Type":"application/json","Content-Length":"11"}}`))
	f.Add([]byte(`{"v":1,"status":200,"headers":{}}`))
	f.Add([]byte(`{"v":1,"status":200,"headers":{"X":"1","Content-Type":"a","Content-Type":"b","Content-Length":"x"}}`))
	f.Add([]byte(`{"v":1,"status":200,"headers":{"A":"1","B":"2","C":"3","D":"4","E":"5","Cache-Control":"no-cache"}}`))
	f.Add([]byte(`{"v":-0,"status":01}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, ok := parseRequestHeadFast(b, "")
		// A known role changes which string a role is, not what is read.
		if h2, ok2 := parseRequestHeadFast(b, "chat"); ok2 != ok || h2 != h {
			t.Fatalf("%q: with a known role %+v %v, without %+v %v", b, h2, ok2, h, ok)
		}
		if ok {
			var want meshRequestHead
			if err := decodeStrict(b, &want); err != nil {
				t.Fatalf("fast parser accepts %q, encoding/json refuses it: %v", b, err)
			}
			if diff := cmp.Diff(want, h); diff != "" {
				t.Fatalf("%q (-encoding/json +fast):\n%s", b, diff)
			}
		}
		if h, ok := parseResponseHeadFast(b); ok {
			var j meshResponseHead
			if err := decodeStrict(b, &j); err != nil {
				t.Fatalf("fast parser accepts %q, encoding/json refuses it: %v", b, err)
			}
			if len(j.Headers) > maxFastHeadFields {
				t.Fatalf("fast parser accepts %q, of %d headers", b, len(j.Headers))
			}
			// The relayed headers of encoding/json's map, values as
			// they are.
			want := responseHead{V: j.V, Status: j.Status}
			for name, v := range j.Headers {
				if i := slices.Index(relayedResponseHeaders[:], name); i >= 0 {
					want.Headers[i] = v
				}
			}
			if diff := cmp.Diff(want, h); diff != "" {
				t.Fatalf("%q (-encoding/json +fast):\n%s", b, diff)
			}
		}
	})
}

// TestUpstreamAddrs: a base URL is checked and parsed once, a refused one
// is never kept, and the cache stays within its bound.
func TestUpstreamAddrs(t *testing.T) {
	var c upstreamAddrs
	for range 2 {
		a, err := c.get("http://127.0.0.1:8080")
		if err != nil || a != "127.0.0.1:8080" {
			t.Fatalf("got %q, %v", a, err)
		}
	}
	if _, err := c.get("http://example.com:80"); err == nil {
		t.Fatal("a base off the host was accepted")
	}
	if _, ok := c.m.Load("http://example.com:80"); ok {
		t.Fatal("a refused base was cached")
	}
	for i := range 3 * maxUpstreamAddrs {
		if _, err := c.get(fmt.Sprintf("http://127.0.0.1:%d", 1000+i)); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	c.m.Range(func(any, any) bool { n++; return true })
	if n > maxUpstreamAddrs {
		t.Fatalf("%d addresses cached, bound %d", n, maxUpstreamAddrs)
	}
}

// The relayed response headers are looked up by their names as they are
// (httpfast.Value, not Header.Get): each must be in canonical form, or a
// header the instance sent would not be found.
func TestRelayedHeadersCanonical(t *testing.T) {
	for _, name := range relayedResponseHeaders {
		if c := http.CanonicalHeaderKey(name); c != name {
			t.Errorf("relayed header %q is not canonical (%q)", name, c)
		}
	}
	h := http.Header{}
	h.Set("cache-control", "no-store")
	frame, _ := appendResponseHeadFrame(nil, 200, h)
	if !bytes.Contains(frame, []byte(`"Cache-Control":"no-store"`)) {
		t.Errorf("head frame %q lacks the Cache-Control the instance sent", frame)
	}
}

// refAppendJSONString is appendJSONString as it was, a byte at a time:
// the reference the heads' bytes on the wire are held to.
func refAppendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

// appendJSONString writes the bytes it wrote a byte at a time: the heads
// on the wire do not change.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "chat", `q"\`, "a\tb\x01\x1f", "\\\\", `"`, "application/json; charset=utf-8", "é\x7f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, want := appendJSONString([]byte("x"), s), refAppendJSONString([]byte("x"), s)
		if !bytes.Equal(got, want) {
			t.Fatalf("%q: %q, want %q", s, got, want)
		}
	})
}

// TestIsStreamType: the common Content-Types, taken at once, and others,
// folded and cut, answer as the cut and folding do.
func TestIsStreamType(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{"application/json", false},
		{"application/json; charset=utf-8", false},
		{"text/event-stream", true},
		{"application/x-ndjson", true},
		{"Text/Event-Stream; charset=utf-8", true},
		{" application/x-ndjson ;x", true},
		{"text/event-streams", false},
		{"text/plain", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := isStreamType(tt.give); got != tt.want {
			t.Errorf("isStreamType(%q) = %v, want %v", tt.give, got, tt.want)
		}
	}
}
