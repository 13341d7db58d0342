package facts

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/nodeld/nodeld/internal/grammar"
)

// GPUs of other vendors than NVIDIA: AMD's through rocm-smi on Linux, and
// every GPU of a Mac through system_profiler. They become capability
// records only (Facts.GPUs stays what nvidia-smi reports, as facts signed
// by older nodes have it).

// Sub-probe names of the other GPU probes, in Note.Probe.
const (
	ProbeRocmSMI        = "rocm-smi"
	ProbeSystemProfiler = "system_profiler"
)

// SystemProfilerPath is the program Probe asks for a Mac's GPUs, by
// absolute path as sysctl (a service's PATH may lack /usr/sbin).
const SystemProfilerPath = "/usr/sbin/system_profiler"

// RocmSMIArgs returns the arguments of the AMD GPU query: product name,
// utilisation and VRAM of every card, as JSON.
func RocmSMIArgs() []string {
	return []string{"--showproductname", "--showuse", "--showmeminfo", "vram", "--json"}
}

// SystemProfilerArgs returns the arguments of the Mac GPU query, as JSON.
func SystemProfilerArgs() []string { return []string{"SPDisplaysDataType", "-json"} }

// rocmResult is what parseRocmSMI found.
type rocmResult struct {
	gpus    []gpuReading // sorted by index
	skipped int          // cards with malformed fields
	dropped int          // valid cards beyond MaxGPUs
}

// Keys of rocm-smi's JSON: one object per card, "card<N>", whose values
// are strings. Releases spell the product keys differently ("Card series"
// before ROCm 6, "Card Series" since); APUs may give only "Device Name".
var (
	rocmNameKeys = []string{"Card Series", "Card series", "Device Name", "Card Model", "Card model"}
)

const (
	rocmUse       = "GPU use (%)"
	rocmVRAMTotal = "VRAM Total Memory (B)"
	rocmVRAMUsed  = "VRAM Total Used Memory (B)"
	rocmUniqueID  = "Unique ID"
)

// parseRocmSMI decodes the output of rocm-smi with RocmSMIArgs(): a JSON
// object with one object of strings per card "card<N>" (N is the
// index); other top-level keys are ignored. Free VRAM is total less used.
// A card with a malformed field (a number that is not one, a size beyond
// MaxVRAMMiB, a utilisation beyond 100) is skipped and counted; "N/A" or
// a missing field reads as unknown (0 bytes, utilisation unknown). The
// name is the card series, else the device name, else the model unless
// that is only a PCI id ("0x744c").
func parseRocmSMI(data []byte) (rocmResult, error) {
	if len(data) > MaxCommandOutputBytes {
		return rocmResult{}, fmt.Errorf("rocm-smi output is larger than %d bytes", MaxCommandOutputBytes)
	}
	var cards map[string]json.RawMessage
	if err := json.Unmarshal(data, &cards); err != nil {
		return rocmResult{}, fmt.Errorf("rocm-smi output is not a JSON object: %w", err)
	}
	var r rocmResult
	// By index, so that which cards are kept past MaxGPUs does not depend
	// on map order.
	type card struct {
		idx int
		raw json.RawMessage
	}
	var found []card
	for key, raw := range cards {
		n, ok := strings.CutPrefix(key, "card")
		if !ok {
			continue // "system" and the like
		}
		idx, err := strconv.Atoi(n)
		if err != nil || idx < 0 || idx >= MaxGPUIndex || strconv.Itoa(idx) != n {
			r.skipped++
			continue
		}
		found = append(found, card{idx, raw})
	}
	sort.Slice(found, func(i, j int) bool { return found[i].idx < found[j].idx })
	for _, c := range found {
		g, ok := parseRocmCard(c.idx, c.raw)
		if !ok {
			r.skipped++
			continue
		}
		if len(r.gpus) >= MaxGPUs {
			r.dropped++
			continue
		}
		r.gpus = append(r.gpus, g)
	}
	return r, nil
}

// parseRocmCard decodes one card's object.
func parseRocmCard(idx int, raw json.RawMessage) (gpuReading, bool) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return gpuReading{}, false
	}
	str := func(key string) string {
		var s string
		if json.Unmarshal(fields[key], &s) != nil || notAvailable(strings.TrimSpace(s)) {
			return ""
		}
		return strings.TrimSpace(s)
	}
	bytesOf := func(key string) (uint64, bool) {
		s := str(key)
		if s == "" {
			return 0, true
		}
		b, err := strconv.ParseUint(s, 10, 64)
		return b, err == nil && b <= MaxVRAMMiB<<20
	}
	total, ok := bytesOf(rocmVRAMTotal)
	if !ok {
		return gpuReading{}, false
	}
	used, ok := bytesOf(rocmVRAMUsed)
	if !ok {
		return gpuReading{}, false
	}
	util := -1
	if s := str(rocmUse); s != "" {
		u, err := strconv.Atoi(s)
		if err != nil || u < 0 || u > 100 {
			return gpuReading{}, false
		}
		util = u
	}
	name := ""
	for _, k := range rocmNameKeys {
		if s := str(k); s != "" && !pciID(s) {
			name = s
			break
		}
	}
	uuid := str(rocmUniqueID)
	if len(uuid) > MaxGPUUUIDBytes || !grammar.PrintableASCII(uuid) {
		uuid = ""
	}
	return gpuReading{
		GPU: GPU{
			Index:          idx,
			Name:           truncateUTF8(name, MaxGPUNameBytes),
			UUID:           uuid,
			VRAMTotalBytes: total,
			VRAMFreeBytes:  total - min(used, total),
		},
		util: util,
	}, true
}

// pciID reports whether s is only a hexadecimal PCI id ("0x744c").
func pciID(s string) bool {
	h, ok := strings.CutPrefix(s, "0x")
	if !ok || h == "" {
		return false
	}
	_, err := strconv.ParseUint(h, 16, 32)
	return err == nil
}

// displayGPU is one GPU system_profiler reports.
type displayGPU struct {
	vendor string // capability word: apple, amd, intel, nvidia
	name   string
	vram   uint64 // dedicated (or, for an integrated GPU, shared) memory; 0 when not reported
	cores  int    // GPU cores (Apple silicon); 0 when not reported
}

// displaysResult is what parseSPDisplays found.
type displaysResult struct {
	gpus    []displayGPU // in system_profiler's order
	skipped int          // entries with no name or a malformed field
	dropped int          // GPUs beyond MaxGPUs
}

// parseSPDisplays decodes the output of system_profiler with
// SystemProfilerArgs(): {"SPDisplaysDataType": [entry, ...]}, an entry
// per GPU (its displays are ignored). The name is sppci_model, else
// _name; the vendor comes from spdisplays_vendor ("sppci_vendor_Apple",
// "sppci_vendor_amd", "Intel", "ATI (0x1002)"...), else from the name;
// memory from spdisplays_vram or spdisplays_vram_shared ("8 GB", "1536
// MB"); cores from sppci_cores. An entry that is not a GPU
// (sppci_device_type other than spdisplays_gpu) is left out.
func parseSPDisplays(data []byte) (displaysResult, error) {
	if len(data) > MaxCommandOutputBytes {
		return displaysResult{}, fmt.Errorf("system_profiler output is larger than %d bytes", MaxCommandOutputBytes)
	}
	var doc struct {
		Items []json.RawMessage `json:"SPDisplaysDataType"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return displaysResult{}, fmt.Errorf("system_profiler output: %w", err)
	}
	var r displaysResult
	for _, raw := range doc.Items {
		var e map[string]json.RawMessage
		if json.Unmarshal(raw, &e) != nil {
			r.skipped++
			continue
		}
		str := func(key string) string {
			var s string
			if json.Unmarshal(e[key], &s) != nil {
				return ""
			}
			return strings.TrimSpace(s)
		}
		if t := str("sppci_device_type"); t != "" && t != "spdisplays_gpu" {
			continue
		}
		g := displayGPU{name: str("sppci_model")}
		if g.name == "" {
			g.name = str("_name")
		}
		if g.name == "" || strings.HasPrefix(g.name, "kHW_") || len(g.name) > MaxLineBytes {
			// kHW_ names are untranslated keys of older releases.
			r.skipped++
			continue
		}
		g.name = truncateUTF8(g.name, MaxGPUNameBytes)
		g.vendor = displayVendor(str("spdisplays_vendor"), g.name)
		ok := true
		for _, k := range []string{"spdisplays_vram", "spdisplays_vram_shared", "_spdisplays_vram"} {
			if s := str(k); s != "" {
				g.vram, ok = parseSize(s)
				break
			}
		}
		if s := str("sppci_cores"); s != "" && ok {
			c, err := strconv.Atoi(s)
			ok = err == nil && c > 0 && c <= 1<<16
			g.cores = c
		}
		if !ok {
			r.skipped++
			continue
		}
		if len(r.gpus) >= MaxGPUs {
			r.dropped++
			continue
		}
		r.gpus = append(r.gpus, g)
	}
	return r, nil
}

// displayVendor is the capability word of a GPU's vendor from
// system_profiler's vendor field, else from its name; "" when neither
// says.
func displayVendor(vendor, name string) string {
	for _, s := range []string{strings.ToLower(vendor), strings.ToLower(name)} {
		switch {
		case strings.Contains(s, "apple"):
			return "apple"
		case strings.Contains(s, "nvidia"):
			return "nvidia"
		case strings.Contains(s, "intel"):
			return "intel"
		case strings.Contains(s, "amd") || strings.Contains(s, "radeon") ||
			s == "ati" || strings.HasPrefix(s, "ati ") || strings.HasSuffix(s, "_ati"):
			return "amd"
		}
	}
	return ""
}

// parseSize reads "<n> GB" or "<n> MB" (binary units, as system_profiler
// means them), up to MaxVRAMMiB.
func parseSize(s string) (uint64, bool) {
	num, unit, ok := strings.Cut(s, " ")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return 0, false
	}
	var mib uint64
	switch unit {
	case "MB":
		mib = n
	case "GB":
		if n > MaxVRAMMiB>>10 {
			return 0, false
		}
		mib = n << 10
	default:
		return 0, false
	}
	if mib > MaxVRAMMiB {
		return 0, false
	}
	return mib << 20, true
}

// probeROCm runs rocm-smi and keeps the AMD GPUs in p. It returns an
// error only when ctx itself is done.
func probeROCm(ctx context.Context, deps ProbeDeps, path string, f *Facts, p *probed) error {
	out, err := runWithin(ctx, deps, NvidiaSMITimeout, path, RocmSMIArgs(), false)
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if err != nil {
		f.note(ProbeRocmSMI, err.Error())
		return nil
	}
	r, err := parseRocmSMI(bytes.TrimSpace(out))
	if err != nil {
		f.note(ProbeRocmSMI, err.Error())
		return nil
	}
	p.amd = r.gpus
	f.noteGPUParse(ProbeRocmSMI, "cards", r.skipped, r.dropped)
	return nil
}

// probeDisplays asks system_profiler for a Mac's GPUs and keeps them in
// p. Hardware does not change while a node runs, so the answer is kept
// in cache (nil: ask every time) for RuntimeVersionMaxAge. It returns an
// error only when ctx itself is done.
func probeDisplays(ctx context.Context, deps ProbeDeps, cache *versionCache, f *Facts, p *probed) error {
	key := SystemProfilerPath + " " + strings.Join(SystemProfilerArgs(), " ")
	out, ok := cache.get(key)
	if !ok {
		b, err := runWithin(ctx, deps, CommandTimeout, SystemProfilerPath, SystemProfilerArgs(), false)
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		if err != nil {
			f.note(ProbeSystemProfiler, err.Error())
			return nil
		}
		out = string(b)
		cache.put(key, out)
	}
	r, err := parseSPDisplays([]byte(out))
	if err != nil {
		f.note(ProbeSystemProfiler, err.Error())
		return nil
	}
	p.displays = r.gpus
	f.noteGPUParse(ProbeSystemProfiler, "entries", r.skipped, r.dropped)
	return nil
}

// noteGPUParse notes what a GPU probe's parser left out: skipped
// malformed items (lines, cards or entries, as what says) and valid GPUs
// dropped beyond MaxGPUs.
func (f *Facts) noteGPUParse(probe, what string, skipped, dropped int) {
	if skipped > 0 {
		f.note(probe, fmt.Sprintf("skipped %d malformed %s", skipped, what))
	}
	if dropped > 0 {
		f.note(probe, fmt.Sprintf("dropped %d GPUs beyond %d", dropped, MaxGPUs))
	}
}
