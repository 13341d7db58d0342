package pkg

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestVerifyNotice(t *testing.T) {
	ctl, other := testKey(t), testKey(t)
	controllers := []ed25519.PublicKey{pubOf(ctl)}
	subject := Subject{Kind: SubjectSigner, Value: hexOf(pubOf(other)), Reason: "key leaked"}
	good, err := SignNotice(ctl, Notice{Seq: 7, IssuedAt: testNow, Action: NoticeRevoke, Subject: subject})
	if err != nil {
		t.Fatal(err)
	}
	byOther, err := SignNotice(other, Notice{Seq: 7, IssuedAt: testNow, Action: NoticeRevoke, Subject: subject})
	if err != nil {
		t.Fatal(err)
	}
	// editPayload changes the signed payload and keeps the signature.
	editPayload := func(edit func(string) string) []byte {
		var env map[string]string
		if err := json.Unmarshal(good, &env); err != nil {
			t.Fatal(err)
		}
		p, err := base64.StdEncoding.DecodeString(env["payload"])
		if err != nil {
			t.Fatal(err)
		}
		env["payload"] = base64.StdEncoding.EncodeToString([]byte(edit(string(p))))
		b, err := json.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name     string
		data     []byte
		wantCode string
	}{
		{"valid", good, ""},
		{"signed by a non-controller", byOther, CodeUntrustedSigner},
		{"action flipped", editPayload(func(p string) string { return strings.Replace(p, `"revoke"`, `"unrevoke"`, 1) }), CodeBadSignature},
		{"seq raised", editPayload(func(p string) string { return strings.Replace(p, `"seq":7`, `"seq":8`, 1) }), CodeBadSignature},
		{"key swapped", []byte(strings.Replace(string(good), hexOf(pubOf(ctl)), hexOf(pubOf(other)), 1)), CodeUntrustedSigner},
		{"garbage", []byte("{"), CodeBadNotice},
		{"unknown field", []byte(strings.Replace(string(good), `{`, `{"x":1,`, 1)), CodeBadNotice},
		{"oversized", []byte(strings.Repeat(" ", MaxNoticeBytes+1)), CodeTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := VerifyNotice(tt.data, controllers)
			if got := ErrorCode(err); got != tt.wantCode {
				t.Fatalf("code = %q, want %q (err %v)", got, tt.wantCode, err)
			}
			if tt.wantCode != "" {
				return
			}
			if n.Seq != 7 || n.Action != NoticeRevoke || !n.Issuer.Equal(pubOf(ctl)) || !n.IssuedAt.Equal(testNow) || len(n.Nonce) != 2*nonceBytes {
				t.Errorf("notice = %+v", n)
			}
			want := subject
			want.At = testNow
			want.By = n.Subject.By
			if diff := cmp.Diff(want, n.Subject); diff != "" {
				t.Errorf("subject (-want +got):\n%s", diff)
			}
			if string(n.Raw) != string(tt.data) {
				t.Error("Raw is not the notice as received")
			}
		})
	}
}

func TestSignNoticeRefusesInvalid(t *testing.T) {
	key := testKey(t)
	for _, n := range []Notice{
		{Seq: 0, IssuedAt: testNow, Action: NoticeRevoke, Subject: Subject{Kind: SubjectPackage, Value: "a"}},
		{Seq: 1, Action: NoticeRevoke, Subject: Subject{Kind: SubjectPackage, Value: "a"}},
		{Seq: 1, IssuedAt: testNow, Action: "delete", Subject: Subject{Kind: SubjectPackage, Value: "a"}},
		{Seq: 1, IssuedAt: testNow, Action: NoticeRevoke, Subject: Subject{Kind: SubjectPackage, Value: "A"}},
	} {
		if _, err := SignNotice(key, n); err == nil {
			t.Errorf("SignNotice(%+v) accepted an invalid notice", n)
		}
	}
}
