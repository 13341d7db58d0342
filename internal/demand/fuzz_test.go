package demand

import (
	"crypto/ed25519"
	"crypto/rand"
	"testing"
	"time"
)

// decodeRequest never panics and never returns a request it did not
// verify: whatever it takes is signed by the key it returns, under
// RequestDomain.
func FuzzDecodeRequest(f *testing.F) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	req := Request{Version: Version, Role: "chat", Requester: selfID(key), Target: "n-a",
		Nonce: "00112233445566778899aabbccddeeff", IssuedAtMS: 1, ExpiresAtMS: 2}
	wire, err := sealJSON(key, RequestDomain, req)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(wire)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"payload":"eA==","public_key":"00","signature":"00"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, pub, code, err := decodeRequest(b)
		if err != nil {
			if code == "" {
				t.Fatal("an error without a code")
			}
			return
		}
		if got.Requester != selfIDPub(pub) {
			t.Fatalf("requester %q not the signing key", got.Requester)
		}
	})
}

// decodeResponse never panics and takes only an answer to the request,
// signed by the expected key.
func FuzzDecodeResponse(f *testing.F) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	req := Request{Version: Version, Role: "chat", Requester: "n-b", Target: selfID(key),
		Nonce: "00112233445566778899aabbccddeeff", IssuedAtMS: 1, ExpiresAtMS: time.Now().UnixMilli()}
	for _, resp := range []Response{
		{Version: Version, Responder: selfID(key), Requester: "n-b", Nonce: req.Nonce, Role: "chat", State: "cold"},
		{Version: Version, Responder: selfID(key), Code: CodeRateLimited},
		{Version: Version, Responder: selfID(key), Requester: "n-b", Nonce: req.Nonce, Role: "chat", Code: CodeNotAllowed},
	} {
		wire, err := sealJSON(key, ResponseDomain, resp)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(wire)
	}
	f.Add([]byte(`{"payload":"","public_key":"","signature":""}`))
	pub := key.Public().(ed25519.PublicKey)
	f.Fuzz(func(t *testing.T, b []byte) {
		resp, err := decodeResponse(b, req, pub)
		if err != nil {
			return
		}
		if resp.Responder != selfID(key) {
			t.Fatalf("responder %q", resp.Responder)
		}
		if resp.Code == "" && !validState(resp.State) {
			t.Fatalf("taken with state %q", resp.State)
		}
	})
}
