package facts

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/nodeld/nodeld/internal/grammar"
)

// Facts is what a node says about itself. It carries no trust: tiers are
// assigned by operators, never claimed by nodes.
type Facts struct {
	// NodeID is identity.NodeID of the node key that signs these facts.
	NodeID string `json:"node_id"`
	// Hostname is the node's host name, for operators reading describe.
	Hostname string `json:"hostname,omitempty"`
	// OS and Arch are Go's GOOS and GOARCH.
	OS   string `json:"os"`
	Arch string `json:"arch"`
	// Kernel is the kernel release, when known (Linux).
	Kernel string `json:"kernel,omitempty"`
	// CPUs is the number of logical CPUs usable by the process.
	CPUs int `json:"cpus"`
	// MemTotalBytes is MemTotal from /proc/meminfo (0 when unknown).
	MemTotalBytes uint64 `json:"mem_total_bytes"`
	// MemFreeBytes is MemAvailable from /proc/meminfo: what can be
	// allocated without swapping. It is never above MemTotalBytes.
	MemFreeBytes uint64 `json:"mem_free_bytes"`
	// GPUs are the GPUs nvidia-smi reported, sorted by index.
	GPUs []GPU `json:"gpus,omitempty"`
	// Runtimes are the runtime kinds this node can start (grammar's
	// runtime names), sorted; always includes grammar.RuntimeProcess.
	Runtimes []string `json:"runtimes"`
	// Labels are the operator's node.labels from config.
	Labels map[string]string `json:"labels,omitempty"`
	// Notes explain sub-probes that failed or were cut short.
	Notes []Note `json:"notes,omitempty"`
	// Capabilities describe the node to the placement engine (reference
	// 3.3): what the fields above say, in the capability grammar, and
	// more (GPU state, runtime versions, operator labels as label.<key>,
	// measured serving speed as perf.infer.<role>). At most
	// MaxCapabilities; facts signed before capabilities existed have
	// none, and their load is unknown.
	Capabilities []Capability `json:"capabilities,omitempty"`
}

// GPU is one GPU as nvidia-smi reports it.
type GPU struct {
	Index          int    `json:"index"`
	Name           string `json:"name"`
	UUID           string `json:"uuid,omitempty"`
	VRAMTotalBytes uint64 `json:"vram_total_bytes"`
	// VRAMFreeBytes is never above VRAMTotalBytes.
	VRAMFreeBytes uint64 `json:"vram_free_bytes"`
}

// Note records why a sub-probe gave nothing or less than it should have.
type Note struct {
	// Probe names the sub-probe: ProbeMeminfo, ProbeNvidiaSMI, ...
	Probe string `json:"probe"`
	// Message is human-readable and bounded by MaxNoteBytes.
	Message string `json:"message"`
}

// Sub-probe names used in Note.Probe.
const (
	ProbeMeminfo   = "meminfo"
	ProbeKernel    = "kernel"
	ProbeHostname  = "hostname"
	ProbeNvidiaSMI = "nvidia-smi"
	ProbeSysctl    = "sysctl"
	ProbeVMStat    = "vm_stat"
)

// ErrInvalidFacts is wrapped by every structural validation error.
var ErrInvalidFacts = errors.New("invalid facts")

// Validate checks the bounds and shapes of f that Verify enforces on
// facts from other nodes, reporting every problem at once. It does not
// check NodeID against a key; Verify does.
func (f *Facts) Validate() error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidFacts}, args...)...))
	}
	if f.NodeID == "" || len(f.NodeID) > MaxShortStringBytes || !grammar.PrintableASCII(f.NodeID) {
		add("node_id must be 1 to %d printable ASCII characters", MaxShortStringBytes)
	}
	for _, s := range []struct{ name, v string }{
		{"hostname", f.Hostname}, {"os", f.OS}, {"arch", f.Arch}, {"kernel", f.Kernel},
	} {
		if len(s.v) > MaxShortStringBytes || !utf8.ValidString(s.v) {
			add("%s must be at most %d bytes of UTF-8", s.name, MaxShortStringBytes)
		}
	}
	if f.OS == "" || f.Arch == "" {
		add("os and arch are required")
	}
	if f.CPUs < 0 || f.CPUs > MaxCPUs {
		add("cpus %d is out of range 0 to %d", f.CPUs, MaxCPUs)
	}
	if f.MemTotalBytes > MaxMemBytes {
		add("mem_total_bytes %d is above %d", f.MemTotalBytes, uint64(MaxMemBytes))
	}
	if f.MemFreeBytes > f.MemTotalBytes {
		add("mem_free_bytes %d is above mem_total_bytes %d", f.MemFreeBytes, f.MemTotalBytes)
	}
	if len(f.GPUs) > MaxGPUs {
		add("%d gpus, at most %d", len(f.GPUs), MaxGPUs)
	} else {
		seen := make(map[int]bool, len(f.GPUs))
		for i, g := range f.GPUs {
			if g.Index < 0 || g.Index >= MaxGPUIndex || seen[g.Index] {
				add("gpus[%d]: index %d is negative, too large or repeated", i, g.Index)
			}
			seen[g.Index] = true
			if len(g.Name) > MaxGPUNameBytes || !utf8.ValidString(g.Name) {
				add("gpus[%d]: name must be at most %d bytes of UTF-8", i, MaxGPUNameBytes)
			}
			if len(g.UUID) > MaxGPUUUIDBytes || !grammar.PrintableASCII(g.UUID) {
				add("gpus[%d]: uuid must be at most %d printable ASCII characters", i, MaxGPUUUIDBytes)
			}
			if g.VRAMTotalBytes > MaxVRAMMiB<<20 || g.VRAMFreeBytes > g.VRAMTotalBytes {
				add("gpus[%d]: vram is above %d MiB or free exceeds total", i, MaxVRAMMiB)
			}
		}
	}
	if len(f.Runtimes) > MaxRuntimes {
		add("%d runtimes, at most %d", len(f.Runtimes), MaxRuntimes)
	} else {
		for i, r := range f.Runtimes {
			// Any Name: a newer node may know a runtime this one does not.
			if !grammar.ValidName(r) {
				add("runtimes[%d]: %q is not %s", i, r, grammar.NameSyntax)
			}
		}
	}
	// Label keys of older nodes may be any Name; the capability records
	// carry them as label.<key> only when they are one word.
	if err := validateLabels(f.Labels, grammar.ValidName, grammar.NameSyntax); err != nil {
		errs = append(errs, err)
	}
	if len(f.Notes) > MaxNotes {
		add("%d notes, at most %d", len(f.Notes), MaxNotes)
	} else {
		for i, n := range f.Notes {
			if len(n.Probe) > MaxShortStringBytes || len(n.Message) > MaxNoteBytes ||
				!utf8.ValidString(n.Probe) || !utf8.ValidString(n.Message) {
				add("notes[%d]: probe or message too long or not UTF-8", i)
			}
		}
	}
	if len(f.Capabilities) > MaxCapabilities {
		add("%d capabilities, at most %d", len(f.Capabilities), MaxCapabilities)
	} else {
		for i, c := range f.Capabilities {
			if err := c.validate(); err != nil {
				add("capabilities[%d]: %v", i, err)
			}
		}
	}
	return errors.Join(errs...)
}

// ValidateLabels checks operator labels: at most MaxLabels; keys that are
// one capability word (grammar.ValidLabelKey), so each becomes the
// capability label.<key>; values of at most grammar.MaxLabelValueLen
// printable ASCII; and no key that would assert trust (IsTrustLabel).
func ValidateLabels(labels map[string]string) error {
	return validateLabels(labels, grammar.ValidLabelKey, grammar.LabelKeySyntax)
}

// validateLabels is ValidateLabels with the key rule given: Verify
// accepts the dotted keys older nodes may sign.
func validateLabels(labels map[string]string, validKey func(string) bool, keySyntax string) error {
	if len(labels) > MaxLabels {
		return fmt.Errorf("%w: %d labels, at most %d", ErrInvalidFacts, len(labels), MaxLabels)
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var errs []error
	for _, k := range keys {
		switch {
		case !validKey(k):
			errs = append(errs, fmt.Errorf("%w: label key %q is not %s", ErrInvalidFacts, k, keySyntax))
		case IsTrustLabel(k):
			errs = append(errs, fmt.Errorf("%w: label %q would assert trust; tiers come only from the operator", ErrInvalidFacts, k))
		}
		if !grammar.ValidLabelValue(labels[k]) {
			errs = append(errs, fmt.Errorf("%w: label %q value must be at most %d printable ASCII characters", ErrInvalidFacts, k, grammar.MaxLabelValueLen))
		}
	}
	return errors.Join(errs...)
}

// IsTrustLabel reports whether a label key names trust ("tier", "trust",
// or a key under "tier." or "trust."). Such labels are refused: a node
// never asserts its own trust.
func IsTrustLabel(k string) bool {
	for _, p := range []string{"tier", "trust"} {
		if k == p || strings.HasPrefix(k, p+".") {
			return true
		}
	}
	return false
}

// truncateUTF8 cuts s to at most max bytes without splitting a rune, and
// replaces invalid UTF-8.
func truncateUTF8(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
