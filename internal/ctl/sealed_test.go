package ctl

import (
	"crypto/ed25519"
	"crypto/rand"
	"testing"
	"time"
)

// Seal and Open round-trip under another call's domain, refuse
// workload.ctl's own domains, and a signature under one domain does not
// open under another.
func TestSealOpen(t *testing.T) {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	wire, err := Seal(key, "nodeld.test.v1", []byte(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	payload, got, err := Open(wire, "nodeld.test.v1", 64)
	if err != nil || string(payload) != `{"a":1}` || !got.Equal(pub) {
		t.Fatalf("Open = %s, %v", payload, err)
	}
	if _, _, err := Open(wire, "nodeld.other.v1", 64); err == nil {
		t.Fatal("opened under another domain")
	}
	if _, _, err := Open(wire, "nodeld.test.v1", 3); err == nil {
		t.Fatal("opened over the payload bound")
	}
	for _, d := range []string{RequestDomain, ResponseDomain} {
		if _, err := Seal(key, d, []byte(`{}`)); err == nil {
			t.Errorf("sealed under %s", d)
		}
		if _, _, err := Open(wire, d, 64); err == nil {
			t.Errorf("opened under %s", d)
		}
	}
	now := time.UnixMilli(1_000_000)
	if r := CheckLifetime(now.UnixMilli(), now.Add(time.Minute).UnixMilli(), now, time.Minute); r != nil {
		t.Fatalf("valid lifetime refused: %v", r)
	}
	if r := CheckLifetime(now.UnixMilli(), now.Add(2*time.Minute).UnixMilli(), now, time.Minute); r == nil || r.Code != CodeExpired {
		t.Fatalf("over-long lifetime: %v", r)
	}
	if r := CheckLifetime(now.Add(-2*time.Minute).UnixMilli(), now.Add(-time.Minute).UnixMilli(), now, time.Minute); r == nil {
		t.Fatal("expired taken")
	}
}
