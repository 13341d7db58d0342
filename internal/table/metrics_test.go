package table

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	tb := New(self, Options{Audit: &fakeAuditor{err: errors.New("full")}})
	if err := tb.Register(reg); err != nil {
		t.Fatal(err)
	}
	if err := New(self, Options{}).Register(reg); err == nil {
		t.Error("a second table registered on the same registry, want an error")
	}
	tb.ExposeToMesh("chat", true)
	tb.AllowRemoteNode("chat", "n-b", true)
	want := `
# HELP nodeld_table_audit_failures_total Audit records of table changes that could not be written.
# TYPE nodeld_table_audit_failures_total counter
nodeld_table_audit_failures_total 2
# HELP nodeld_table_generation Resolution-relevant changes of the placement table so far.
# TYPE nodeld_table_generation gauge
nodeld_table_generation 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
