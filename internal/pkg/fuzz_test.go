package pkg

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fuzzSeed makes a fixed key, so seeds signed with it stay valid.
var fuzzSeed = bytes.Repeat([]byte{7}, ed25519.SeedSize)

var knownCodes = map[string]bool{
	CodeBadSignature: true, CodeUntrustedSigner: true, CodeBadManifest: true, CodeFileMissing: true,
	CodeFileSize: true, CodeFileHash: true, CodePathEscape: true, CodeTooLarge: true, CodeRevoked: true,
	CodeBadNotice: true,
}

func seedManifest(t testing.TB) []byte {
	m := testManifest()
	m.Schema = SchemaVersion
	m.Files = []File{{Path: "bin/serve", Size: 3, SHA256: string(bytes.Repeat([]byte("0"), 64)), Exec: true}}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func FuzzParseManifest(f *testing.F) {
	f.Add(seedManifest(f))
	f.Add([]byte(`{"schema":1,"files":[{"path":"../x","size":1,"sha256":""}]}`))
	f.Add([]byte(`{"schema":1,"schema":1}`))
	f.Add([]byte(`[[[[[[[[[[[[[[[[[[[[`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data)
		if err != nil {
			if !knownCodes[ErrorCode(err)] {
				t.Fatalf("error without a known code: %v", err)
			}
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("parsed manifest does not validate: %v", err)
		}
	})
}

func FuzzVerifyManifest(f *testing.F) {
	key := ed25519.NewKeyFromSeed(fuzzSeed)
	anchors := Anchors{pubOf(key)}
	manifest := seedManifest(f)
	sig := []byte(`{"signatures":[{"key":"` + hexOf(pubOf(key)) + `","sig":"` + hexOf(signManifest(key, manifest)) + `"}]}`)
	f.Add(manifest, sig)
	f.Add(manifest, []byte(`{"signatures":[]}`))
	f.Add([]byte(`{}`), sig)
	f.Fuzz(func(t *testing.T, manifest, sig []byte) {
		m, signer, err := VerifyManifest(manifest, sig, anchors)
		if err != nil {
			if !knownCodes[ErrorCode(err)] {
				t.Fatalf("error without a known code: %v", err)
			}
			return
		}
		if !signer.Equal(pubOf(key)) || m == nil {
			t.Fatal("accepted without the anchor's signature")
		}
		if !ed25519.Verify(signer, domainMessage(manifestDomain, manifest), signFromFile(t, sig, signer)) {
			t.Fatal("accepted a signature that does not verify")
		}
	})
}

// signFromFile returns signer's signature bytes from a signature file.
func signFromFile(t *testing.T, sigFile []byte, signer ed25519.PublicKey) []byte {
	sf, err := ParseSigFile(sigFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sf.Signatures {
		if s.Key == hexOf(signer) {
			b, _ := hex.DecodeString(s.Sig)
			return b
		}
	}
	t.Fatal("signer not in the signature file")
	return nil
}

func FuzzVerifyNotice(f *testing.F) {
	key := ed25519.NewKeyFromSeed(fuzzSeed)
	good, err := SignNotice(key, Notice{Seq: 1, IssuedAt: testNow, Nonce: string(bytes.Repeat([]byte("a"), 32)), Action: NoticeRevoke, Subject: Subject{Kind: SubjectPackage, Value: "echo"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"payload":"","key":"","sig":""}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := VerifyNotice(data, []ed25519.PublicKey{pubOf(key)})
		if err != nil {
			if !knownCodes[ErrorCode(err)] {
				t.Fatalf("error without a known code: %v", err)
			}
			return
		}
		if err := n.Subject.Validate(); err != nil {
			t.Fatalf("accepted notice with an invalid subject: %v", err)
		}
	})
}

func FuzzParseRevocations(f *testing.F) {
	f.Add([]byte(`{"version":1,"generation":2,"subjects":[{"kind":"package","value":"a","at":"2026-01-01T00:00:00Z"}],"issuers":{"` + hexOf(pubOf(ed25519.NewKeyFromSeed(fuzzSeed))) + `":3}}`))
	f.Add([]byte(`{"version":1,"generation":0,"subjects":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := parseRevocations(data)
		if err != nil {
			return
		}
		enc, err := encodeRevocations(st)
		if err != nil {
			t.Fatal(err)
		}
		again, err := parseRevocations(enc)
		if err != nil {
			t.Fatalf("re-parse of encoded list: %v", err)
		}
		if diff := cmp.Diff(sortedSubjects(st.subjects), sortedSubjects(again.subjects)); diff != "" || st.gen != again.gen {
			t.Fatalf("round trip changed the list (-first +second):\n%s", diff)
		}
	})
}
