package facts

import (
	"errors"
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/grammar"
)

func TestValidate(t *testing.T) {
	valid := func() Facts {
		return Facts{
			NodeID: "n-0123456789abcdef", OS: "linux", Arch: "amd64", CPUs: 4,
			MemTotalBytes: 1 << 30, MemFreeBytes: 1 << 29,
			GPUs:     []GPU{{Index: 0, Name: "X", UUID: "GPU-1", VRAMTotalBytes: 1 << 30, VRAMFreeBytes: 1 << 20}},
			Runtimes: []string{grammar.RuntimeProcess},
			Labels:   map[string]string{"rack": "a"},
			Notes:    []Note{{Probe: ProbeKernel, Message: "missing"}},
		}
	}
	tests := []struct {
		name string
		edit func(f *Facts)
		ok   bool
	}{
		{name: "valid", edit: func(*Facts) {}, ok: true},
		{name: "empty node id", edit: func(f *Facts) { f.NodeID = "" }},
		{name: "node id with newline", edit: func(f *Facts) { f.NodeID = "n-\n" }},
		{name: "no os", edit: func(f *Facts) { f.OS = "" }},
		{name: "long hostname", edit: func(f *Facts) { f.Hostname = strings.Repeat("h", MaxShortStringBytes+1) }},
		{name: "kernel not utf-8", edit: func(f *Facts) { f.Kernel = "\xff" }},
		{name: "negative cpus", edit: func(f *Facts) { f.CPUs = -1 }},
		{name: "too many cpus", edit: func(f *Facts) { f.CPUs = MaxCPUs + 1 }},
		{name: "absurd memory", edit: func(f *Facts) { f.MemTotalBytes, f.MemFreeBytes = MaxMemBytes+1, 0 }},
		{name: "free above total", edit: func(f *Facts) { f.MemFreeBytes = f.MemTotalBytes + 1 }},
		{name: "repeated gpu index", edit: func(f *Facts) { f.GPUs = append(f.GPUs, f.GPUs[0]) }},
		{name: "negative gpu index", edit: func(f *Facts) { f.GPUs[0].Index = -1 }},
		{name: "vram free above total", edit: func(f *Facts) { f.GPUs[0].VRAMFreeBytes = f.GPUs[0].VRAMTotalBytes + 1 }},
		{name: "absurd vram", edit: func(f *Facts) { f.GPUs[0].VRAMTotalBytes = MaxVRAMMiB<<20 + 1 }},
		{name: "long gpu name", edit: func(f *Facts) { f.GPUs[0].Name = strings.Repeat("n", MaxGPUNameBytes+1) }},
		{name: "gpu uuid with control byte", edit: func(f *Facts) { f.GPUs[0].UUID = "GPU-\x00" }},
		{name: "runtime with upper case", edit: func(f *Facts) { f.Runtimes = []string{"Process"} }},
		{name: "too many runtimes", edit: func(f *Facts) { f.Runtimes = make([]string, MaxRuntimes+1) }},
		{name: "too many labels", edit: func(f *Facts) {
			for i := range MaxLabels + 1 {
				f.Labels[strings.Repeat("k", i+1)] = "v"
			}
		}},
		{name: "trust label", edit: func(f *Facts) { f.Labels["trust"] = "full" }},
		{name: "label under tier.", edit: func(f *Facts) { f.Labels["tier.min"] = "2" }},
		{name: "label dot-dot", edit: func(f *Facts) { f.Labels[".."] = "x" }},
		{name: "too many notes", edit: func(f *Facts) { f.Notes = make([]Note, MaxNotes+1) }},
		{name: "long note", edit: func(f *Facts) { f.Notes[0].Message = strings.Repeat("m", MaxNoteBytes+1) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := valid()
			tt.edit(&f)
			err := f.Validate()
			if tt.ok != (err == nil) {
				t.Fatalf("Validate = %v, want ok %v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidFacts) {
				t.Errorf("Validate error %v does not wrap ErrInvalidFacts", err)
			}
		})
	}
}

func TestLabelsNamedLikeTrustButNotTrust(t *testing.T) {
	// Only tier and trust themselves and keys under them are refused.
	for _, k := range []string{"tiered", "trustworthy-rack"} {
		if err := ValidateLabels(map[string]string{k: "v"}); err != nil {
			t.Errorf("ValidateLabels(%q) = %v, want ok", k, err)
		}
	}
	// Dotted keys are no longer label keys (each label is one capability
	// word), but facts an older node signed with one still validate.
	for _, k := range []string{"gpu.tier", "x.trust"} {
		if err := ValidateLabels(map[string]string{k: "v"}); err == nil {
			t.Errorf("ValidateLabels(%q) accepted a dotted key", k)
		}
		f := Facts{NodeID: "n-0", OS: "linux", Arch: "amd64", Labels: map[string]string{k: "v"}}
		if err := f.Validate(); err != nil {
			t.Errorf("facts with label %q: %v", k, err)
		}
	}
	if err := (&Facts{NodeID: "n-0", OS: "linux", Arch: "amd64", Labels: map[string]string{"trust.level": "v"}}).Validate(); err == nil {
		t.Error("facts with a dotted trust label validate")
	}
}

func TestTooManyNotesAreDropped(t *testing.T) {
	var f Facts
	for range MaxNotes + 5 {
		f.note(ProbeKernel, strings.Repeat("é", MaxNoteBytes))
	}
	if len(f.Notes) != MaxNotes {
		t.Fatalf("%d notes, want %d", len(f.Notes), MaxNotes)
	}
	f.NodeID, f.OS, f.Arch = "n-0", "linux", "amd64"
	if err := f.Validate(); err != nil {
		t.Fatalf("bounded notes do not validate: %v", err)
	}
}
