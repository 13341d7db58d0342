package host

import (
	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/pkg"
)

// recordClass is the Recorder budget a repeatable refusal takes, by its
// code. A bad signature on a call, a call signed by another key than its
// link's, and a notice that is forged or signed by an untrusted key are
// evidence of an attack: they take the security budget, which no flood
// of other refusals can fill, so they are still chained one by one while
// one lasts. Every other refusal is keyed by an admitted peer (the link
// authenticated it).
func recordClass(code string) chain.RecordClass {
	switch code {
	case string(ctl.CodeSignature), string(ctl.CodePeerMismatch), pkg.CodeUntrustedSigner, pkg.CodeBadSignature:
		return chain.ClassSecurity
	}
	return chain.ClassPeer
}
