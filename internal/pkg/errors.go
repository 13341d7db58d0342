package pkg

import (
	"errors"
	"fmt"
)

// Stable VerifyError codes. They cross the mesh inside refusals, so they
// are never renamed.
const (
	CodeBadSignature    = "bad_signature"
	CodeUntrustedSigner = "untrusted_signer"
	CodeBadManifest     = "bad_manifest"
	CodeFileMissing     = "file_missing"
	CodeFileSize        = "file_size"
	CodeFileHash        = "file_hash"
	CodePathEscape      = "path_escape"
	CodeTooLarge        = "too_large"
	CodeRevoked         = "revoked"
	// CodeBadNotice is a revocation notice that does not decode.
	CodeBadNotice = "bad_notice"
)

// VerifyError is why a package, a manifest or a notice was refused.
// Callers branch on Code, never on Detail.
type VerifyError struct {
	// Code is one of the Code constants.
	Code string
	// Detail says what was wrong, for people.
	Detail string
	// Subject is the revoked subject when Code is CodeRevoked.
	Subject *Subject
	// Err is the underlying error, if any.
	Err error
}

// Error implements error.
func (e *VerifyError) Error() string { return "package " + e.Code + ": " + e.Detail }

// Unwrap returns the underlying error.
func (e *VerifyError) Unwrap() error { return e.Err }

func verr(code, format string, args ...any) *VerifyError {
	return &VerifyError{Code: code, Detail: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the Code of the *VerifyError in err's chain, or "" when
// there is none.
func ErrorCode(err error) string {
	if ve, ok := errors.AsType[*VerifyError](err); ok {
		return ve.Code
	}
	return ""
}
