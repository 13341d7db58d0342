package grammar

import (
	"strings"
	"testing"
)

func TestWellKnownCapabilities(t *testing.T) {
	for _, id := range []string{
		CapCPUArch + ".amd64", CapCPUCores, CapOS + ".linux", CapMemSystem, CapMemUnified, CapMemVRAM,
		CapAccelGPU + ".nvidia", CapRuntime + ".process", CapLabel + ".rack", CapPerfInfer + ".chat",
	} {
		if !ValidCapabilityRecordID(id) || CapabilityFamily(id) == TrustFamily {
			t.Errorf("%q is not a capability record id", id)
		}
	}
	for _, a := range []string{AttrName, AttrKernel, AttrCount, AttrTotal, AttrFree, AttrIndex, AttrMemBytes,
		AttrUtilization, AttrVersion, AttrValue, AttrMetric, AttrSamples} {
		if !ValidAttrName(a) {
			t.Errorf("%q is not an attribute name", a)
		}
	}
	if !SelectorMatches(CapAccel, CapAccelGPU+".amd") {
		t.Error("accel does not select a GPU")
	}
}

func TestRuntimeCapabilityWord(t *testing.T) {
	// Every known Segment is its Name without dots and hyphens: the rule
	// unknown names follow.
	for _, k := range RuntimeKinds() {
		if got := strings.NewReplacer(".", "", "-", "").Replace(k.Name); got != k.Segment {
			t.Errorf("%q: segment %q does not follow the rule (%q)", k.Name, k.Segment, got)
		}
	}
	for name, want := range map[string]string{
		"llama.cpp": "runtime.llamacpp", "mlx-lm": "runtime.mlxlm", "openai": "runtime.openai",
		"process": "runtime.process", "ollama": "runtime.ollama", "vllm": "runtime.vllm", "tensor-rt.llm": "runtime.tensorrtllm",
	} {
		if got := RuntimeCapabilityID(name); got != want {
			t.Errorf("RuntimeCapabilityID(%q) = %q, want %q", name, got, want)
		}
		if !ValidCapabilityRecordID(RuntimeCapabilityID(name)) {
			t.Errorf("RuntimeCapabilityID(%q) is not a record id", name)
		}
	}
}

func TestValidNodeClass(t *testing.T) {
	for c, want := range map[string]bool{
		"dev-mac": true, "edge_box": true, "9": true, strings.Repeat("a", MaxNameLen): true,
		"dev.mac": false, "Dev-Mac": false, "": false, "-dev": false, "dev mac": false,
		strings.Repeat("a", MaxNameLen+1): false,
	} {
		if got := ValidNodeClass(c); got != want {
			t.Errorf("ValidNodeClass(%q) = %v, want %v", c, got, want)
		}
		if want && !ValidCapabilityRecordID(CapNodeClass+"."+c) {
			t.Errorf("node.class.%s is not a record id", c)
		}
	}
}

func TestValidLabelKey(t *testing.T) {
	for k, want := range map[string]bool{
		"rack": true, "gpu_vendor": true, "zone-1": true, "9lives": true,
		"gpu.vendor": false, "Rack": false, "": false, "-a": false, "_a": false, strings.Repeat("a", MaxNameLen): true,
		strings.Repeat("a", MaxNameLen+1): false,
	} {
		if got := ValidLabelKey(k); got != want {
			t.Errorf("ValidLabelKey(%q) = %v, want %v", k, got, want)
		}
		if want && !ValidCapabilityRecordID(CapLabel+"."+k) {
			t.Errorf("label.%s is not a record id", k)
		}
	}
	if !strings.Contains(LabelKeySyntax, "64") {
		t.Error("LabelKeySyntax does not state the bound")
	}
}
