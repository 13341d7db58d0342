package host

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/chain"
)

// journal writes the host's chain records: every part of the host chains
// through it, with source AuditSource, and a record that cannot be
// written is logged and counted (nodeld_host_audit_failures_total). It
// holds no state of its own beyond its collaborators, so it needs no lock.
type journal struct {
	audit    Auditor
	rec      Recorder
	failures prometheus.Counter
	log      *zap.Logger
}

// record writes one chain record with source AuditSource.
func (j *journal) record(kind string, payload any) error {
	if err := j.audit.Record(AuditSource, kind, payload); err != nil {
		j.failures.Inc()
		j.log.Error("chain record", zap.String("kind", kind), zap.Error(err))
		return fmt.Errorf("chain %s: %w", kind, err)
	}
	return nil
}

// repeatable hands a record its sender can repeat at will to the
// Recorder with source AuditSource, keyed by sender (the authenticated
// peer), kind and reason (a fixed code), in the class of its reason
// (recordClass). It chains the first of a key per period and counts the
// rest.
func (j *journal) repeatable(sender, kind, reason string, payload any) {
	key := chain.RecordKey{Class: recordClass(reason), Sender: sender, Kind: kind, Reason: reason}
	if _, err := j.rec.Record(key, AuditSource, payload); err != nil {
		j.failures.Inc()
		j.log.Error("chain record", zap.String("kind", kind), zap.Error(err))
	}
}
