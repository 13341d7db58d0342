package grammar

import "testing"

func TestCapabilityVocabulary(t *testing.T) {
	for _, tt := range []struct {
		sel, id string
		want    bool
	}{
		{"accel.gpu", "accel.gpu.nvidia.a100", true},
		{"accel.gpu", "accel.gpu", true},
		{"accel.gpu", "accel.gpux", false},
		{"accel.gpu", "accel", false},
		{"accel", "accel.gpu", true},
		{"", "accel", false},
	} {
		if got := SelectorMatches(tt.sel, tt.id); got != tt.want {
			t.Errorf("SelectorMatches(%q, %q) = %v, want %v", tt.sel, tt.id, got, tt.want)
		}
	}
	for id, want := range map[string]bool{"cpu.cores": true, "cpu": false, "label.rack": true, "trust.tier": true, "Cpu.cores": false, "a.b.c.d.e.f.g.h": true, "a.b.c.d.e.f.g.h.i": false} {
		if got := ValidCapabilityRecordID(id); got != want {
			t.Errorf("ValidCapabilityRecordID(%q) = %v, want %v", id, got, want)
		}
	}
	if CapabilityFamily("trust.tier") != TrustFamily || CapabilityFamily("cpu") != "cpu" {
		t.Error("CapabilityFamily")
	}
	c, _ := ProvenanceRank(ProvenanceClaimed)
	p, _ := ProvenanceRank(ProvenanceProbed)
	m, _ := ProvenanceRank(ProvenanceMeasured)
	if !(c < p && p < m) {
		t.Error("provenance order")
	}
	if _, ok := ProvenanceRank("rumoured"); ok {
		t.Error("unknown provenance accepted")
	}
	for s, want := range map[string]bool{"available": true, "busy": true, "reserved": true, "degraded": true, "idle": false, "": false} {
		if ValidCapabilityState(s) != want {
			t.Errorf("ValidCapabilityState(%q) != %v", s, want)
		}
	}
	for op, want := range map[string]bool{"eq": true, "gte": true, "lte": true, "in": true, "has": true, "ne": false} {
		if ValidPredicateOp(op) != want {
			t.Errorf("ValidPredicateOp(%q) != %v", op, want)
		}
	}
	for n, want := range map[string]bool{"mem_bytes": true, "index": true, "x1": true, "1x": false, "Mem": false, "": false, "a-b": false} {
		if ValidAttrName(n) != want {
			t.Errorf("ValidAttrName(%q) != %v", n, want)
		}
	}
}
