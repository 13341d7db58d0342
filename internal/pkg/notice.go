package pkg

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nodeld/nodeld/internal/identity"
)

// noticeDomain prefixes the payload under a notice signature.
const noticeDomain = "nodeld.pkg.revocation.v1\x00"

// noticeVersion is the payload format version.
const noticeVersion = 1

// nonceBytes is the size of a notice nonce.
const nonceBytes = 16

// Notice actions.
const (
	NoticeRevoke   = "revoke"
	NoticeUnrevoke = "unrevoke"
)

// Notice is a controller's signed revocation or lifting of one. On the
// wire it is the JSON envelope {"payload": base64, "key": hex, "sig": hex};
// the signature covers noticeDomain followed by the exact payload bytes,
// and the payload is JSON {"v", "seq", "issued_at", "nonce", "action",
// "kind", "value", "reason"}.
type Notice struct {
	// Issuer is the controller key that signed it.
	Issuer ed25519.PublicKey
	// Seq increases with every notice of the issuer; ApplyNotice refuses
	// one not above the last applied.
	Seq uint64
	// IssuedAt is when the controller signed it.
	IssuedAt time.Time
	// Nonce is 32 lower-case hex characters, making each notice unique.
	Nonce string
	// Action is NoticeRevoke or NoticeUnrevoke.
	Action string
	// Subject is what is (un)revoked. VerifyNotice sets At to IssuedAt and
	// By to "controller <node id>".
	Subject Subject
	// Raw is the signed notice as received, to be kept and passed on to
	// peers unchanged.
	Raw []byte
}

type noticeEnvelope struct {
	Payload []byte `json:"payload"`
	Key     string `json:"key"`
	Sig     string `json:"sig"`
}

type noticePayload struct {
	V        int       `json:"v"`
	Seq      uint64    `json:"seq"`
	IssuedAt time.Time `json:"issued_at"`
	Nonce    string    `json:"nonce"`
	Action   string    `json:"action"`
	Kind     string    `json:"kind"`
	Value    string    `json:"value"`
	Reason   string    `json:"reason,omitempty"`
}

// SignNotice encodes and signs a notice with a controller key: n's Seq,
// IssuedAt, Action and Subject (kind, value, reason) are used; an empty
// Nonce is drawn at random. It returns the bytes to send.
func SignNotice(key ed25519.PrivateKey, n Notice) ([]byte, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("sign notice: ed25519 private key has %d bytes", len(key))
	}
	if n.Nonce == "" {
		b := make([]byte, nonceBytes)
		if _, err := rand.Read(b); err != nil {
			return nil, fmt.Errorf("sign notice: nonce: %w", err)
		}
		n.Nonce = hex.EncodeToString(b)
	}
	p := noticePayload{
		V: noticeVersion, Seq: n.Seq, IssuedAt: n.IssuedAt.UTC(), Nonce: n.Nonce,
		Action: n.Action, Kind: n.Subject.Kind, Value: n.Subject.Value, Reason: n.Subject.Reason,
	}
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("sign notice: %w", err)
	}
	payload, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("sign notice: %w", err)
	}
	if len(payload) > MaxNoticePayloadBytes {
		return nil, fmt.Errorf("sign notice: payload has %d bytes, limit %d", len(payload), MaxNoticePayloadBytes)
	}
	env := noticeEnvelope{
		Payload: payload,
		Key:     hex.EncodeToString(key.Public().(ed25519.PublicKey)),
		Sig:     hex.EncodeToString(ed25519.Sign(key, domainMessage(noticeDomain, payload))),
	}
	data, err := json.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("sign notice: %w", err)
	}
	return data, nil
}

func (p *noticePayload) validate() error {
	if p.V != noticeVersion {
		return fmt.Errorf("notice version %d, want %d", p.V, noticeVersion)
	}
	if p.Seq == 0 {
		return fmt.Errorf("notice seq must be at least 1")
	}
	if p.IssuedAt.IsZero() {
		return fmt.Errorf("notice has no issued_at")
	}
	if !validHex(p.Nonce, nonceBytes) {
		return fmt.Errorf("notice nonce is not %d lower-case hex characters", 2*nonceBytes)
	}
	if p.Action != NoticeRevoke && p.Action != NoticeUnrevoke {
		return fmt.Errorf("notice action %q is not %s or %s", clip(p.Action), NoticeRevoke, NoticeUnrevoke)
	}
	return Subject{Kind: p.Kind, Value: p.Value, Reason: p.Reason}.Validate()
}

// VerifyNotice checks that data is a notice signed by one of controllers
// over the payload bytes as received, then decodes the payload. Errors
// are *VerifyError: CodeTooLarge, CodeBadNotice, CodeBadSignature,
// CodeUntrustedSigner.
func VerifyNotice(data []byte, controllers []ed25519.PublicKey) (Notice, error) {
	if len(data) > MaxNoticeBytes {
		return Notice{}, verr(CodeTooLarge, "notice has %d bytes, limit %d", len(data), MaxNoticeBytes)
	}
	var env noticeEnvelope
	if err := decodeStrict(data, &env); err != nil {
		return Notice{}, &VerifyError{Code: CodeBadNotice, Detail: "decode notice: " + err.Error(), Err: err}
	}
	if len(env.Payload) == 0 || len(env.Payload) > MaxNoticePayloadBytes {
		return Notice{}, verr(CodeBadNotice, "notice payload has %d bytes, want 1 to %d", len(env.Payload), MaxNoticePayloadBytes)
	}
	if !validHex(env.Key, ed25519.PublicKeySize) || !validHex(env.Sig, ed25519.SignatureSize) {
		return Notice{}, verr(CodeBadNotice, "notice key or sig is not lower-case hex of the right length")
	}
	keyBytes, _ := hex.DecodeString(env.Key)
	key := ed25519.PublicKey(keyBytes)
	trusted := false
	for _, c := range controllers {
		if c.Equal(key) {
			trusted = true
			break
		}
	}
	if !trusted {
		return Notice{}, verr(CodeUntrustedSigner, "notice is signed by %s, not a configured controller", identity.NodeID(key))
	}
	sig, _ := hex.DecodeString(env.Sig)
	if !ed25519.Verify(key, domainMessage(noticeDomain, env.Payload), sig) {
		return Notice{}, verr(CodeBadSignature, "notice signature does not verify")
	}
	var p noticePayload
	if err := decodeStrict(env.Payload, &p); err != nil {
		return Notice{}, &VerifyError{Code: CodeBadNotice, Detail: "decode notice payload: " + err.Error(), Err: err}
	}
	if err := p.validate(); err != nil {
		return Notice{}, &VerifyError{Code: CodeBadNotice, Detail: err.Error(), Err: err}
	}
	return Notice{
		Issuer:   key,
		Seq:      p.Seq,
		IssuedAt: p.IssuedAt,
		Nonce:    p.Nonce,
		Action:   p.Action,
		Subject: Subject{
			Kind: p.Kind, Value: p.Value, Reason: p.Reason,
			At: p.IssuedAt.UTC(), By: "controller " + identity.NodeID(key),
		},
		Raw: append([]byte(nil), data...),
	}, nil
}
