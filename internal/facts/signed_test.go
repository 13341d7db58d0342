package facts

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/identity"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)

func testKey(b byte) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{b}, ed25519.SeedSize))
}

func pubOf(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

func testFacts(t *testing.T) Facts {
	t.Helper()
	m := linuxMachine()
	m.onPath["nvidia-smi"] = true
	m.onPath["llama-server"] = true
	m.smiOut = realNvidiaSMI
	f, err := Probe(context.Background(), m.deps(), map[string]string{"rack": "a", "note": "<a&b>"})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// signRaw signs arbitrary payload bytes the way Sign does, to build
// envelopes Sign itself would refuse.
func signRaw(key ed25519.PrivateKey, body string) Signed {
	return Signed{
		Payload:   json.RawMessage(body),
		PublicKey: hex.EncodeToString(pubOf(key)),
		Signature: hex.EncodeToString(ed25519.Sign(key, append([]byte(DomainTag), body...))),
	}
}

func TestSignVerifyRoundTrip(t *testing.T) {
	key := testKey(1)
	f := testFacts(t)
	s, err := Sign(key, f, 7, t0, DefaultTTL)
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	want := f
	want.NodeID = identity.NodeID(pubOf(key))
	wantMeta := Meta{Seq: 7, IssuedAt: t0, TTL: DefaultTTL, ExpiresAt: t0.Add(DefaultTTL)}

	for _, expected := range []ed25519.PublicKey{pubOf(key), nil} {
		got, meta, err := Verify(s, expected, t0.Add(time.Minute))
		if err != nil {
			t.Fatalf("Verify(expected %x): %v", expected, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("facts (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(wantMeta, meta); diff != "" {
			t.Errorf("meta (-want +got):\n%s", diff)
		}
	}
}

func TestSignedSurvivesJSON(t *testing.T) {
	key := testKey(1)
	s, err := Sign(key, testFacts(t), 1, t0, DefaultTTL)
	if err != nil {
		t.Fatal(err)
	}
	wire, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back Signed
	if err := json.Unmarshal(wire, &back); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(s.Payload, back.Payload) {
		t.Fatalf("payload changed on the wire:\n%s\n%s", s.Payload, back.Payload)
	}
	if _, _, err := Verify(back, pubOf(key), t0); err != nil {
		t.Fatalf("Verify after JSON round trip: %v", err)
	}
}

func TestVerifyRefusesTampering(t *testing.T) {
	key, other := testKey(1), testKey(2)
	good, err := Sign(key, testFacts(t), 3, t0, DefaultTTL)
	if err != nil {
		t.Fatal(err)
	}
	otherSigned, err := Sign(other, testFacts(t), 3, t0, DefaultTTL)
	if err != nil {
		t.Fatal(err)
	}

	flip := func(s string, i int) string {
		b := []byte(s)
		b[i] ^= 0x01
		return string(b)
	}
	tests := []struct {
		name     string
		give     func() Signed
		expected ed25519.PublicKey
		wantErr  error
	}{
		{
			name: "payload byte",
			give: func() Signed {
				s := good
				s.Payload = bytes.Replace(bytes.Clone(s.Payload), []byte(`"seq":3`), []byte(`"seq":4`), 1)
				return s
			},
			wantErr: ErrBadSignature,
		},
		{
			name: "signature byte",
			give: func() Signed {
				s := good
				s.Signature = flip(s.Signature, 10)
				return s
			},
			wantErr: ErrBadSignature,
		},
		{
			name: "key swapped, any key",
			give: func() Signed {
				s := good
				s.PublicKey = otherSigned.PublicKey
				return s
			},
			wantErr: ErrBadSignature,
		},
		{
			name:     "other signer, expected key",
			give:     func() Signed { return otherSigned },
			expected: pubOf(key),
			wantErr:  ErrKeyMismatch,
		},
		{
			name: "node id of another key",
			give: func() Signed {
				body := strings.Replace(string(good.Payload), identity.NodeID(pubOf(key)), identity.NodeID(pubOf(other)), 1)
				return signRaw(key, body)
			},
			wantErr: ErrNodeIDMismatch,
		},
		{
			name: "tier smuggled into facts",
			give: func() Signed {
				body := strings.Replace(string(good.Payload), `"facts":{`, `"facts":{"tier":"gold",`, 1)
				return signRaw(key, body)
			},
			wantErr: ErrMalformed,
		},
		{
			name: "tier label",
			give: func() Signed {
				body := strings.Replace(string(good.Payload), `"labels":{`, `"labels":{"tier":"gold",`, 1)
				return signRaw(key, body)
			},
			wantErr: ErrInvalidFacts,
		},
		{
			name: "unknown top-level field",
			give: func() Signed {
				return signRaw(key, strings.Replace(string(good.Payload), `"seq":3`, `"seq":3,"x":1`, 1))
			},
			wantErr: ErrMalformed,
		},
		{
			name:    "trailing data",
			give:    func() Signed { return signRaw(key, string(good.Payload)+"{}") },
			wantErr: ErrMalformed,
		},
		{
			name:    "zero seq",
			give:    func() Signed { return signRaw(key, strings.Replace(string(good.Payload), `"seq":3`, `"seq":0`, 1)) },
			wantErr: ErrMalformed,
		},
		{
			name: "ttl too long",
			give: func() Signed {
				return signRaw(key, strings.Replace(string(good.Payload), `"ttl_seconds":300`, `"ttl_seconds":86401`, 1))
			},
			wantErr: ErrInvalidTTL,
		},
		{
			name: "ttl too short",
			give: func() Signed {
				return signRaw(key, strings.Replace(string(good.Payload), `"ttl_seconds":300`, `"ttl_seconds":9`, 1))
			},
			wantErr: ErrInvalidTTL,
		},
		{
			name: "bad issued_at",
			give: func() Signed {
				return signRaw(key, strings.Replace(string(good.Payload), `"issued_at":"2025`, `"issued_at":"yesterday 2025`, 1))
			},
			wantErr: ErrMalformed,
		},
		{
			name: "free memory above total",
			give: func() Signed {
				return signRaw(key, strings.Replace(string(good.Payload), `"mem_free_bytes":`, `"mem_free_bytes":9`, 1))
			},
			wantErr: ErrInvalidFacts,
		},
		{
			name: "payload too large",
			give: func() Signed {
				return signRaw(key, string(good.Payload[:len(good.Payload)-1])+`,"x":"`+strings.Repeat("a", MaxPayloadBytes)+`"}`)
			},
			wantErr: ErrMalformed,
		},
		{
			name:    "empty payload",
			give:    func() Signed { s := good; s.Payload = nil; return s },
			wantErr: ErrMalformed,
		},
		{
			name:    "key not hex",
			give:    func() Signed { s := good; s.PublicKey = strings.Repeat("zz", 32); return s },
			wantErr: ErrMalformed,
		},
		{
			name:    "signature short",
			give:    func() Signed { s := good; s.Signature = s.Signature[:10]; return s },
			wantErr: ErrMalformed,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Verify(tt.give(), tt.expected, t0)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Verify error = %v, want %v", err, tt.wantErr)
			}
		})
	}
	if _, _, err := Verify(good, pubOf(key), t0); err != nil {
		t.Fatalf("the untampered envelope must verify: %v", err)
	}
}

func TestVerifyTime(t *testing.T) {
	key := testKey(1)
	s, err := Sign(key, testFacts(t), 1, t0, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		now         time.Time
		wantErr     error
		wantExpired bool
	}{
		{name: "at issue", now: t0},
		{name: "just before expiry", now: t0.Add(time.Minute - time.Nanosecond)},
		{name: "at expiry", now: t0.Add(time.Minute), wantExpired: true},
		{name: "long after", now: t0.Add(time.Hour), wantExpired: true},
		{name: "issued within the skew", now: t0.Add(-MaxFutureSkew)},
		{name: "issued in the future", now: t0.Add(-MaxFutureSkew - time.Nanosecond), wantErr: ErrFromFuture},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, meta, err := Verify(s, nil, tt.now)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Verify error = %v, want %v", err, tt.wantErr)
			}
			if err == nil && meta.Expired != tt.wantExpired {
				t.Errorf("Expired = %v, want %v", meta.Expired, tt.wantExpired)
			}
		})
	}
}

func TestSignRefuses(t *testing.T) {
	key := testKey(1)
	tests := []struct {
		name    string
		key     ed25519.PrivateKey
		facts   func(f *Facts)
		seq     uint64
		ttl     time.Duration
		wantErr error
	}{
		{name: "short key", key: key[:10], seq: 1, ttl: DefaultTTL},
		{name: "zero seq", key: key, seq: 0, ttl: DefaultTTL},
		{name: "ttl too short", key: key, seq: 1, ttl: MinTTL - time.Second, wantErr: ErrInvalidTTL},
		{name: "ttl too long", key: key, seq: 1, ttl: MaxTTL + time.Second, wantErr: ErrInvalidTTL},
		{name: "ttl not whole seconds", key: key, seq: 1, ttl: DefaultTTL + time.Millisecond, wantErr: ErrInvalidTTL},
		{name: "node id of another key", key: key, facts: func(f *Facts) { f.NodeID = identity.NodeID(pubOf(testKey(2))) },
			seq: 1, ttl: DefaultTTL, wantErr: ErrNodeIDMismatch},
		{name: "tier label", key: key, facts: func(f *Facts) { f.Labels = map[string]string{"tier": "gold"} },
			seq: 1, ttl: DefaultTTL, wantErr: ErrInvalidFacts},
		{name: "too many gpus", key: key, facts: func(f *Facts) { f.GPUs = make([]GPU, MaxGPUs+1) },
			seq: 1, ttl: DefaultTTL, wantErr: ErrInvalidFacts},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := testFacts(t)
			if tt.facts != nil {
				tt.facts(&f)
			}
			_, err := Sign(tt.key, f, tt.seq, t0, tt.ttl)
			if err == nil {
				t.Fatal("Sign accepted it")
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("Sign error = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

// TestFactsCarryNoTrust pins the invariant that nodes never assert their
// own trust: no field of the facts types, and no key of signed facts JSON,
// names a tier or trust.
func TestFactsCarryNoTrust(t *testing.T) {
	var walkType func(reflect.Type, string)
	seen := map[reflect.Type]bool{} // grammar.Value holds a list of itself
	walkType = func(ty reflect.Type, path string) {
		if seen[ty] {
			return
		}
		seen[ty] = true
		switch ty.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map:
			walkType(ty.Elem(), path)
		case reflect.Struct:
			for i := range ty.NumField() {
				fl := ty.Field(i)
				name := strings.ToLower(fl.Name + " " + fl.Tag.Get("json"))
				if strings.Contains(name, "tier") || strings.Contains(name, "trust") {
					t.Errorf("field %s.%s names trust", path, fl.Name)
				}
				walkType(fl.Type, path+"."+fl.Name)
			}
		}
	}
	walkType(reflect.TypeFor[payload](), "payload")
	walkType(reflect.TypeFor[Signed](), "Signed")

	s, err := Sign(testKey(1), testFacts(t), 1, t0, DefaultTTL)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(s.Payload, &doc); err != nil {
		t.Fatal(err)
	}
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if k == "tier" || k == "trust" || strings.HasPrefix(k, "tier.") || strings.HasPrefix(k, "trust.") {
					t.Errorf("signed facts JSON has key %q", k)
				}
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(doc)
}

// FuzzVerify signs arbitrary payloads with a test key, so the fuzzer
// reaches the payload decoder behind the signature check.
func FuzzVerify(f *testing.F) {
	key := testKey(1)
	good, err := Sign(key, Facts{OS: "linux", Arch: "amd64", CPUs: 1, Runtimes: []string{grammar.RuntimeProcess}}, 1, t0, DefaultTTL)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(good.Payload))
	f.Add(`{"facts":{"node_id":"n-0","os":"linux","arch":"amd64","labels":{"tier":"x"}},"seq":1,"issued_at":"2025-03-01T12:00:00Z","ttl_seconds":60}`)
	f.Add(`{}`)
	f.Add(`[`)
	f.Fuzz(func(t *testing.T, body string) {
		got, meta, err := Verify(signRaw(key, body), pubOf(key), t0)
		if err != nil {
			return
		}
		if got.NodeID != identity.NodeID(pubOf(key)) || meta.Seq == 0 || meta.TTL < MinTTL || meta.TTL > MaxTTL {
			t.Fatalf("accepted out-of-bounds facts: %+v %+v", got, meta)
		}
		if err := got.Validate(); err != nil {
			t.Fatalf("accepted invalid facts: %v", err)
		}
		for k := range got.Labels {
			if IsTrustLabel(k) {
				t.Fatalf("accepted trust label %q", k)
			}
		}
	})
}
