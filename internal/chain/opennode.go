package chain

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// Kinds of the entries OpenNode chains about the chain itself.
const (
	KindChainReset    = "node.chain_reset"
	KindChainTornTail = "node.chain_torn_tail"
)

// OpenNode is Open as a daemon opens its own chain, the chain's recovery
// written down in the chain: a torn last entry left by a crash is cut (as
// Open does) and chained under source as KindChainTornTail; a broken
// chain is ErrBroken unless reset, with which it is archived (Archive),
// a new chain begun and the reset chained first (KindChainReset, with the
// archive's path and the break). log is told of both.
func OpenNode(path string, key ed25519.PrivateKey, source string, reset bool, opts Options, log *zap.Logger) (*Chain, error) {
	ch, report, err := Open(path, key, opts)
	if errors.Is(err, ErrBroken) && reset {
		breakErr := err
		archived, aerr := Archive(path, time.Now())
		if aerr != nil {
			return nil, fmt.Errorf("archive broken chain: %w", aerr)
		}
		log.Warn("archived a broken chain and started a new one", zap.String("archived", archived), zap.NamedError("break", breakErr))
		ch, report, err = Open(path, key, opts)
		if err == nil {
			if _, aerr := ch.Append(source, KindChainReset, map[string]any{"archived": archived, "break": breakErr.Error()}); aerr != nil {
				_ = ch.Close()
				return nil, aerr
			}
		}
	}
	if err != nil {
		return nil, err
	}
	if report != nil && report.Torn != nil {
		log.Warn("cut a torn last chain entry left by a crash; the original file was kept",
			zap.String("copy", report.Torn.KeptAt), zap.Int64("bytes_cut", report.Torn.Bytes))
		if _, err := ch.Append(source, KindChainTornTail, map[string]any{"copy": report.Torn.KeptAt, "bytes_cut": report.Torn.Bytes}); err != nil {
			_ = ch.Close()
			return nil, err
		}
	}
	return ch, nil
}
