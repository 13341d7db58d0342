package httpfast

import (
	"bufio"
	"bytes"
	"net/http"
	"testing"
)

// TestAppendRequestHeadDrops: the head sent to an instance has the
// client's headers but the forwarding claims, the framing, Host and the
// hop-by-hop ones (those Connection names too), with the instance's Host
// and the body's length.
func TestAppendRequestHeadDrops(t *testing.T) {
	r := &http.Request{Method: http.MethodPost, RequestURI: "/v1/chat/completions", Header: http.Header{
		"Host": {"client"}, "Content-Length": {"99"}, "Forwarded": {"for=x"}, "X-Forwarded-For": {"x"},
		"X-Forwarded-Host": {"x"}, "X-Forwarded-Proto": {"https"}, "Connection": {"close, X-Named"},
		"X-Named": {"n"}, "Keep-Alive": {"timeout=5"}, "Te": {"trailers"}, "Upgrade": {"h2c"},
		"Proxy-Authorization": {"x"}, "Trailer": {"X"}, "Transfer-Encoding": {"chunked"},
		"X-Keep": {"k"}, "Content-Type": {"application/json"},
	}}
	head := appendRequestHead(nil, &Request{R: r, Host: "127.0.0.1:8090", Body: []byte("{}"), InMem: true})
	got, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(append(head, "{}"...))))
	if err != nil {
		t.Fatalf("%q: %v", head, err)
	}
	want := http.Header{"X-Keep": {"k"}, "Content-Type": {"application/json"}, "Te": {"trailers"}, "Content-Length": {"2"}}
	if len(got.Header) != len(want) || got.Host != "127.0.0.1:8090" || got.ContentLength != 2 {
		t.Fatalf("sent %q", head)
	}
	for k, v := range want {
		if got.Header.Get(k) != v[0] {
			t.Fatalf("sent %q, want %s: %s", head, k, v[0])
		}
	}
}
