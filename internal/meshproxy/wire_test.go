package meshproxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/proxy"
)

// frames encodes a frame sequence as it appears on a stream.
func frames(t testing.TB, fs ...any) []byte {
	t.Helper()
	var b bytes.Buffer
	for i := 0; i < len(fs); i += 2 {
		typ := fs[i].(mesh.FrameType)
		var payload []byte
		switch v := fs[i+1].(type) {
		case nil:
		case string:
			payload = []byte(v)
		case []byte:
			payload = v
		default:
			var err error
			if payload, err = json.Marshal(v); err != nil {
				t.Fatal(err)
			}
		}
		if err := mesh.WriteFrame(&b, typ, payload); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

func TestDecodeRequestHead(t *testing.T) {
	ok := `{"v":1,"role":"chat","method":"POST","path":"/v1/chat/completions","query":"a=b","content_type":"application/json","accept":"text/event-stream","body_bytes":3}`
	tests := []struct {
		name, give string
		wantCode   string // "" for success
	}{
		{"valid", ok, ""},
		{"models get", `{"v":1,"role":"chat","method":"GET","path":"/v1/models","body_bytes":0}`, ""},
		{"version", `{"v":2,"role":"chat","method":"POST","path":"/v1/embeddings","body_bytes":0}`, RefuseBadRequest},
		{"unknown field", `{"v":1,"role":"chat","method":"POST","path":"/v1/embeddings","body_bytes":0,"authorization":"x"}`, RefuseBadRequest},
		{"trailing", `{"v":1,"role":"chat","method":"POST","path":"/v1/embeddings","body_bytes":0} {}`, RefuseBadRequest},
		{"bad role", `{"v":1,"role":"a/b","method":"POST","path":"/v1/embeddings","body_bytes":0}`, RefuseBadRequest},
		{"method", `{"v":1,"role":"chat","method":"DELETE","path":"/v1/embeddings","body_bytes":0}`, RefuseBadRequest},
		{"health", `{"v":1,"role":"chat","method":"GET","path":"/health","body_bytes":0}`, RefuseForbiddenPath},
		{"ollama inference path", `{"v":1,"role":"chat","method":"POST","path":"/api/chat","body_bytes":0}`, ""},
		{"ollama read path", `{"v":1,"role":"chat","method":"POST","path":"/api/show","body_bytes":0}`, RefuseForbiddenPath},
		{"ollama management path", `{"v":1,"role":"chat","method":"POST","path":"/api/pull","body_bytes":0}`, RefuseForbiddenPath},
		{"other v1", `{"v":1,"role":"chat","method":"POST","path":"/v1/props","body_bytes":0}`, RefuseForbiddenPath},
		{"query space", `{"v":1,"role":"chat","method":"GET","path":"/v1/models","query":"a b","body_bytes":0}`, RefuseBadRequest},
		{"crlf header", `{"v":1,"role":"chat","method":"POST","path":"/v1/embeddings","content_type":"a\r\nX: y","body_bytes":0}`, RefuseBadRequest},
		{"unknown body length", `{"v":1,"role":"chat","method":"POST","path":"/v1/embeddings","body_bytes":-1}`, ""},
		{"negative body", `{"v":1,"role":"chat","method":"POST","path":"/v1/embeddings","body_bytes":-2}`, RefuseBadRequest},
		{"not json", `nope`, RefuseBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeRequestHead([]byte(tt.give), "")
			var we *wireError
			switch {
			case tt.wantCode == "" && err != nil:
				t.Fatalf("err %v, want nil", err)
			case tt.wantCode != "" && (!errors.As(err, &we) || we.code != tt.wantCode):
				t.Fatalf("err %v, want code %s", err, tt.wantCode)
			}
		})
	}
}

func TestDecodeResponseHead(t *testing.T) {
	for _, tt := range []struct {
		name, give string
		want       relayedHeaders
	}{
		{"unsafe and not relayed dropped", `{"v":1,"status":200,"headers":{"Content-Type":"text/event-stream","Cache-Control":"no\ncache","Set-Cookie":"a=b"}}`,
			relayedHeaders{hdrContentType: "text/event-stream"}},
		{"all relayed", `{"v":1,"status":200,"headers":{"Content-Type":"application/json","Cache-Control":"no-store","Content-Length":"11"}}`,
			relayedHeaders{"application/json", "no-store", "11"}},
		{"no headers", `{"v":1,"status":200}`, relayedHeaders{}},
		{"empty headers", `{"v":1,"status":200,"headers":{}}`, relayedHeaders{}},
		{"null headers", `{"v":1,"status":200,"headers":null}`, relayedHeaders{}},
		{"empty value", `{"v":1,"status":200,"headers":{"Content-Type":""}}`, relayedHeaders{}},
		{"bad content length", `{"v":1,"status":200,"headers":{"Content-Length":"-1","Content-Type":"a/b"}}`, relayedHeaders{hdrContentType: "a/b"}},
		{"name not canonical", `{"v":1,"status":200,"headers":{"content-type":"a/b"}}`, relayedHeaders{}},
		{"escaped name", `{"v":1,"status":200,"headers":{"Content\u002dType":"a/b"}}`, relayedHeaders{hdrContentType: "a/b"}},
		// A name given twice keeps its last value, as encoding/json does
		// with a map; a last value that is unsafe drops the header.
		{"twice", `{"v":1,"status":200,"headers":{"Content-Type":"a/b","Content-Type":"c/d"}}`, relayedHeaders{hdrContentType: "c/d"}},
		{"twice, last unsafe", `{"v":1,"status":200,"headers":{"Content-Length":"12","Content-Length":"x"}}`, relayedHeaders{}},
		{"twice, first unsafe", `{"v":1,"status":200,"headers":{"Content-Length":"x","Content-Length":"12"}}`, relayedHeaders{hdrContentLength: "12"}},
		{"more fields than read fast", `{"v":1,"status":200,"headers":{"A":"1","B":"2","C":"3","D":"4","E":"5","F":"6","G":"7","Cache-Control":"no-cache"}}`,
			relayedHeaders{hdrCacheControl: "no-cache"}},
		{"headers twice", `{"v":1,"status":200,"headers":{"Content-Type":"a/b"},"headers":{"Cache-Control":"no-cache"}}`,
			relayedHeaders{hdrContentType: "a/b", hdrCacheControl: "no-cache"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// As written, and in another form that only encoding/json
			// reads: the same head.
			for _, b := range []string{tt.give, strings.Replace(tt.give, `"status":`, `"status": `, 1)} {
				got, err := decodeResponseHead([]byte(b))
				if err != nil {
					t.Fatalf("%s: %v", b, err)
				}
				want := responseHead{V: 1, Status: 200, Headers: tt.want}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s (-want +got):\n%s", b, diff)
				}
			}
		})
	}
	for _, bad := range []string{`{"v":1,"status":101}`, `{"v":1,"status":199}`, `{"v":1,"status":600}`, `{"v":0,"status":200}`, `{"v":1,"status":200,"x":1}`,
		`{"v":1,"status":200,"headers":{"Content-Type":1}}`, `{"v":1,"status":200,"headers":[]}`} {
		if _, err := decodeResponseHead([]byte(bad)); err == nil {
			t.Errorf("%s decoded", bad)
		}
	}
}

func TestRelayResponseStateMachine(t *testing.T) {
	head := meshResponseHead{V: 1, Status: 201, Headers: map[string]string{"Content-Type": "application/json"}}
	tests := []struct {
		name       string
		give       []byte
		wantErr    error // errMalformedFrames, or nil
		wantRefuse string
		wantBody   string
	}{
		{"ok", frames(t, frameRespHead, head, frameRespBody, "ab", frameRespBody, "cd", frameRespEnd, nil), nil, "", "abcd"},
		{"body before head", frames(t, frameRespBody, "ab"), errMalformedFrames, "", ""},
		{"end before head", frames(t, frameRespEnd, nil), errMalformedFrames, "", ""},
		{"two heads", frames(t, frameRespHead, head, frameRespHead, head), errMalformedFrames, "", ""},
		{"interim head", frames(t, frameRespHead, meshResponseHead{V: 1, Status: 101}), errMalformedFrames, "", ""},
		{"request frame", frames(t, frameReqHead, head), errMalformedFrames, "", ""},
		{"eof without end", frames(t, frameRespHead, head, frameRespBody, "ab"), errMalformedFrames, "", "ab"},
		{"truncated", frames(t, frameRespHead, head)[:7], mesh.ErrTruncatedFrame, "", ""},
		{"refusal", frames(t, frameRefusal, meshRefusal{V: 1, Code: RefuseOverCapacity}), nil, RefuseOverCapacity, ""},
		{"refusal unknown code", frames(t, frameRefusal, meshRefusal{V: 1, Code: "weird"}), nil, "", ""},
		{"refusal midway", frames(t, frameRespHead, head, frameRespBody, "ab", frameRefusal, meshRefusal{V: 1, Code: RefuseUpstreamError}), nil, RefuseUpstreamError, "ab"},
		{"oversized chunk", frames(t, frameRespHead, head, frameRespBody, make([]byte, MeshChunkBytes+1)), errMalformedFrames, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			err := relayResponse(bytes.NewReader(tt.give), rec, nil)
			var ref *peerRefusal
			switch {
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err %v, want %v", err, tt.wantErr)
				}
			case tt.wantRefuse != "" || tt.name == "refusal unknown code":
				if !errors.As(err, &ref) || ref.code != tt.wantRefuse {
					t.Fatalf("err %v, want refusal %q", err, tt.wantRefuse)
				}
			case err != nil:
				t.Fatalf("err %v", err)
			default:
				if rec.Code != 201 || rec.Header().Get("Content-Type") != "application/json" {
					t.Errorf("head %d %v", rec.Code, rec.Header())
				}
			}
			if got := rec.Body.String(); got != tt.wantBody {
				t.Errorf("body %q, want %q", got, tt.wantBody)
			}
		})
	}
}

func TestReadRequest(t *testing.T) {
	head := meshRequestHead{V: 1, Role: "chat", Method: "POST", Path: "/v1/embeddings", BodyBytes: 4}
	tests := []struct {
		name     string
		give     []byte
		wantErr  error
		wantBody string
	}{
		{"ok", frames(t, frameReqHead, head, frameReqBody, "ab", frameReqBody, "cd", frameReqEnd, nil), nil, "abcd"},
		{"body first", frames(t, frameReqBody, "ab"), errMalformedFrames, ""},
		{"longer than announced", frames(t, frameReqHead, head, frameReqBody, "abcde"), errMalformedFrames, ""},
		{"shorter than announced", frames(t, frameReqHead, head, frameReqBody, "ab", frameReqEnd, nil), errMalformedFrames, ""},
		{"response frame", frames(t, frameReqHead, head, frameRespBody, "ab"), errMalformedFrames, ""},
		{"no end", frames(t, frameReqHead, head, frameReqBody, "abcd"), io.EOF, ""},
		{"chunk too large", frames(t, frameReqHead, meshRequestHead{V: 1, Role: "chat", Method: "POST", Path: "/v1/embeddings", BodyBytes: 1 << 20},
			frameReqBody, make([]byte, MeshChunkBytes+1)), mesh.ErrFrameTooLarge, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := bytes.NewReader(tt.give)
			h, err := readRequestHead(r)
			var body []byte
			if err == nil {
				body, err = readRequestBody(r, h, proxy.DefaultMeshMaxBodyBytes, nil)
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err %v, want %v", err, tt.wantErr)
			}
			if string(body) != tt.wantBody {
				t.Errorf("body %q, want %q", body, tt.wantBody)
			}
		})
	}
}

func FuzzDecodeRequestHead(f *testing.F) {
	f.Add([]byte(`{"v":1,"role":"chat","method":"POST","path":"/v1/chat/completions","query":"a=b","content_type":"application/json","body_bytes":3}`))
	f.Add([]byte(`{"v":1,"role":"chat","method":"GET","path":"/v1/models","body_bytes":0}`))
	f.Add([]byte(`{"v":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeRequestHead(b, "")
		if err != nil {
			return
		}
		if !proxy.IsMeshPath(h.Path) || !grammar.ValidName(h.Role) || h.BodyBytes < -1 || (h.ContentType != "" && !validHeaderValue(h.ContentType)) {
			t.Fatalf("accepted %+v", h)
		}
	})
}

// referenceResponseHead decodes a response head as decodeResponseHead
// did with a map: encoding/json only, the map filtered, then put in an
// array.
func referenceResponseHead(b []byte) (responseHead, bool) {
	var j meshResponseHead
	if err := decodeStrict(b, &j); err != nil || j.V != MeshWireVersion || j.Status < 200 || j.Status > 599 {
		return responseHead{}, false
	}
	for name, v := range j.Headers {
		if !slices.Contains(relayedResponseHeaders[:], name) || !validHeaderValue(v) || (name == "Content-Length" && !validContentLength(v)) {
			delete(j.Headers, name)
		}
	}
	h := responseHead{V: j.V, Status: j.Status}
	for name, v := range j.Headers {
		h.Headers[slices.Index(relayedResponseHeaders[:], name)] = v
	}
	return h, true
}

func FuzzDecodeResponseHead(f *testing.F) {
	f.Add([]byte(`{"v":1,"status":200,"headers":{"Content-Type":"text/event-stream"}}`))
	f.Add([]byte(`{"v":1,"status":101}`))
	f.Add([]byte(`{"v":1,"status":200,"headers":{"Content-Type":"a/b","X":"y","Content-Length":"12","Content-Length":"1x"}}`))
	f.Add([]byte(`{"v":1,"status":200,"headers":{"Cache-Control":"no-cache"},"headers":{"Content-Type":"a\u0062"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeResponseHead(b)
		want, ok := referenceResponseHead(b)
		if (err == nil) != ok || h != want {
			t.Fatalf("%q: %+v, %v; encoding/json alone: %+v, %v", b, h, err, want, ok)
		}
		if err != nil {
			return
		}
		if h.Status < 200 || h.Status > 599 {
			t.Fatalf("accepted %+v", h)
		}
		for i, v := range h.Headers {
			if v != "" && (!validHeaderValue(v) || (i == hdrContentLength && !validContentLength(v))) {
				t.Fatalf("unsafe header value %q", v)
			}
		}
	})
}

func FuzzDecodeRefusal(f *testing.F) {
	f.Add([]byte(`{"v":1,"code":"over_capacity","message":"over capacity"}`))
	f.Add([]byte(`{"v":1,"code":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRefusal(b)
		if err != nil {
			return
		}
		if _, ok := refusalStatus[r.Code]; !ok {
			t.Fatalf("unknown code kept: %q", r.Code)
		}
	})
}

func FuzzRelayResponse(f *testing.F) {
	head := meshResponseHead{V: 1, Status: 200, Headers: map[string]string{"Content-Type": "text/event-stream"}}
	f.Add(frames(f, frameRespHead, head, frameRespBody, "data: x\n\n", frameRespEnd, nil))
	f.Add(frames(f, frameRefusal, meshRefusal{V: 1, Code: RefuseNotServed}))
	f.Add(frames(f, frameRespBody, "x", frameRespHead, head))
	f.Fuzz(func(t *testing.T, b []byte) {
		rec := httptest.NewRecorder()
		err := relayResponse(bytes.NewReader(b), rec, nil)
		if err == nil && (rec.Code < 200 || rec.Code > 599) {
			t.Fatalf("success with status %d", rec.Code)
		}
		// Only the relayed headers, one safe value each, and nosniff.
		for name, vs := range rec.Header() {
			i := slices.Index(relayedResponseHeaders[:], name)
			if len(vs) != 1 || (name != "X-Content-Type-Options" && i < 0) || !validHeaderValue(vs[0]) ||
				(i == hdrContentLength && !validContentLength(vs[0])) {
				t.Fatalf("relayed header %s: %q", name, vs)
			}
		}
		if len(rec.Header()) > 0 && rec.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Fatalf("relayed headers %v without nosniff", rec.Header())
		}
		if rec.Body.Len() > len(b) {
			t.Fatalf("relayed %d bytes from %d input bytes", rec.Body.Len(), len(b))
		}
		// Starting on a small buffer (grown when a frame needs it) relays
		// the same.
		small := (*framePools)(nil).bufFor(false, 0)
		rec2 := httptest.NewRecorder()
		err2 := relayResponse(bytes.NewReader(b), rec2, &small)
		if (err == nil) != (err2 == nil) || rec.Code != rec2.Code || !bytes.Equal(rec.Body.Bytes(), rec2.Body.Bytes()) {
			t.Fatalf("large buffer: %d, %d bytes, %v; small: %d, %d bytes, %v",
				rec.Code, rec.Body.Len(), err, rec2.Code, rec2.Body.Len(), err2)
		}
	})
}

func FuzzReadRequest(f *testing.F) {
	head := meshRequestHead{V: 1, Role: "chat", Method: "POST", Path: "/v1/embeddings", BodyBytes: 2}
	f.Add(frames(f, frameReqHead, head, frameReqBody, "ab", frameReqEnd, nil))
	f.Add(frames(f, frameReqHead, head, frameReqEnd, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		h, err := readRequestHead(r)
		if err != nil {
			return
		}
		if h.BodyBytes > proxy.DefaultMeshMaxBodyBytes {
			return // the server refuses before allocating
		}
		body, err := readRequestBody(r, h, proxy.DefaultMeshMaxBodyBytes, nil)
		if err == nil && h.BodyBytes >= 0 && int64(len(body)) != h.BodyBytes {
			t.Fatalf("body %d bytes, announced %d", len(body), h.BodyBytes)
		}
		if err == nil && int64(len(body)) > proxy.DefaultMeshMaxBodyBytes {
			t.Fatalf("body of unknown length read to %d bytes, over the limit", len(body))
		}
	})
}

// headWriter is a ResponseWriter that records whether the head was
// written.
type headWriter struct {
	h      http.Header
	status int
	body   bytes.Buffer
}

func (w *headWriter) Header() http.Header         { return w.h }
func (w *headWriter) WriteHeader(code int)        { w.status = code }
func (w *headWriter) Write(p []byte) (int, error) { return w.body.Write(p) }

// failingReader yields r, then err.
type failingReader struct {
	r   io.Reader
	err error
}

func (f *failingReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF {
		return n, f.err
	}
	return n, err
}

// A response that is not a stream is committed with its first body byte:
// a link that dies between the head and the body leaves nothing written,
// so the proxy may still try another peer. A stream's head is written at
// once.
func TestRelayResponseHoldsHeadUntilBody(t *testing.T) {
	linkDied := errors.New("link died")
	frames := func(contentType string, withBody bool) io.Reader {
		var b bytes.Buffer
		if err := writeJSONFrame(&b, frameRespHead, meshResponseHead{V: MeshWireVersion, Status: 200, Headers: map[string]string{"Content-Type": contentType}}); err != nil {
			t.Fatal(err)
		}
		if withBody {
			if err := mesh.WriteFrame(&b, frameRespBody, []byte(`{"ok":true}`)); err != nil {
				t.Fatal(err)
			}
			if err := mesh.WriteFrame(&b, frameRespEnd, nil); err != nil {
				t.Fatal(err)
			}
		}
		return &failingReader{r: &b, err: linkDied}
	}
	for _, tt := range []struct {
		name        string
		contentType string
		withBody    bool
		wantStatus  int
	}{
		{"json, link dies after the head", "application/json", false, 0},
		{"json, whole answer", "application/json", true, 200},
		{"sse, link dies after the head", "text/event-stream; charset=utf-8", false, 200},
		{"ndjson, link dies after the head", "application/x-ndjson", false, 200},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := &headWriter{h: http.Header{}}
			err := relayResponse(frames(tt.contentType, tt.withBody), w, nil)
			if tt.withBody && err != nil {
				t.Fatalf("relayResponse = %v", err)
			}
			if !tt.withBody && !errors.Is(err, linkDied) {
				t.Fatalf("relayResponse = %v, want the link's error", err)
			}
			if w.status != tt.wantStatus {
				t.Errorf("status written = %d, want %d", w.status, tt.wantStatus)
			}
			if tt.wantStatus == 0 && len(w.h) != 0 {
				t.Errorf("headers set on a response that was not committed: %v", w.h)
			}
		})
	}
}
