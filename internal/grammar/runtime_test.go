package grammar

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRuntimeKinds(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range RuntimeKinds() {
		if !ValidName(k.Name) {
			t.Errorf("%q is not a Name", k.Name)
		}
		if !ValidCapabilitySegment(k.Segment) || !ValidCapabilityID("runtime."+k.Segment) {
			t.Errorf("%q: segment %q is not a capability word", k.Name, k.Segment)
		}
		if seen[k.Name] || seen["seg:"+k.Segment] {
			t.Errorf("%q or %q repeats", k.Name, k.Segment)
		}
		seen[k.Name], seen["seg:"+k.Segment] = true, true
		if got, ok := LookupRuntime(k.Name); !ok || got != k {
			t.Errorf("LookupRuntime(%q) = %+v, %v", k.Name, got, ok)
		}
	}
	// The capability spellings the placement engine uses.
	var segs []string
	for _, k := range RuntimeKinds() {
		segs = append(segs, k.Segment)
	}
	if diff := cmp.Diff([]string{"process", "llamacpp", "ollama", "mlxlm", "openai"}, segs); diff != "" {
		t.Errorf("segments (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"llama.cpp", "ollama", "mlx-lm", "openai"}, AdoptableRuntimes()); diff != "" {
		t.Errorf("adoptable (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"process", "llama.cpp", "ollama", "mlx-lm"}, RunnableRuntimes()); diff != "" {
		t.Errorf("runnable (-want +got):\n%s", diff)
	}
	for _, s := range []string{"", "vllm", "LLAMA.CPP", "llamacpp", "mlx_lm"} {
		if _, ok := LookupRuntime(s); ok {
			t.Errorf("LookupRuntime(%q) found a kind", s)
		}
	}
}

func TestRuntimeKindsIsACopy(t *testing.T) {
	a := RuntimeKinds()
	a[0].Name = "changed"
	if RuntimeKinds()[0].Name == "changed" {
		t.Fatal("RuntimeKinds shares its slice")
	}
}
