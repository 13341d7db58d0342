package facts

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/nodeld/nodeld/internal/grammar"
)

// meminfo is what Probe takes from /proc/meminfo, in bytes.
type meminfo struct {
	total     uint64
	available uint64
}

// errNoMemTotal is returned when /proc/meminfo has no usable MemTotal.
var errNoMemTotal = errors.New("meminfo has no usable MemTotal")

// parseMeminfo decodes /proc/meminfo. Lines longer than MaxLineBytes,
// without a kB unit, with absurd values or repeated keys are ignored.
// available is MemAvailable or, on kernels without it,
// MemFree+Buffers+Cached; it is clamped to total.
func parseMeminfo(data []byte) (meminfo, error) {
	if len(data) > MaxMeminfoBytes {
		return meminfo{}, fmt.Errorf("meminfo is larger than %d bytes", MaxMeminfoBytes)
	}
	const (
		kTotal = iota
		kFree
		kAvailable
		kBuffers
		kCached
		nKeys
	)
	var (
		vals [nKeys]uint64
		have [nKeys]bool
	)
	for len(data) > 0 {
		var line []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			line, data = data, nil
		}
		if len(line) > MaxLineBytes {
			continue
		}
		name, rest, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		k := -1
		switch string(name) {
		case "MemTotal":
			k = kTotal
		case "MemFree":
			k = kFree
		case "MemAvailable":
			k = kAvailable
		case "Buffers":
			k = kBuffers
		case "Cached":
			k = kCached
		}
		if k < 0 || have[k] {
			continue
		}
		fields := bytes.Fields(rest)
		if len(fields) != 2 || string(fields[1]) != "kB" {
			continue
		}
		kb, err := strconv.ParseUint(string(fields[0]), 10, 64)
		if err != nil || kb > MaxMemBytes/1024 {
			continue
		}
		vals[k], have[k] = kb*1024, true
	}
	if !have[kTotal] || vals[kTotal] == 0 {
		return meminfo{}, errNoMemTotal
	}
	m := meminfo{total: vals[kTotal]}
	switch {
	case have[kAvailable]:
		m.available = vals[kAvailable]
	case have[kFree]:
		// Each term is at most MaxMemBytes, so the sum cannot overflow.
		m.available = vals[kFree] + vals[kBuffers] + vals[kCached]
	}
	m.available = min(m.available, m.total)
	return m, nil
}

// nvidiaResult is what parseNvidiaSMI found.
type nvidiaResult struct {
	gpus    []gpuReading
	skipped int // malformed lines
	dropped int // valid GPUs beyond MaxGPUs
}

// gpuReading is one GPU line of nvidia-smi.
type gpuReading struct {
	GPU
	util int // utilisation in percent, -1 when not reported
}

// parseNvidiaSMI decodes the output of nvidia-smi with NvidiaSMIArgs():
// "index, name, uuid, memory.total, memory.free, utilization.gpu" per
// line, memory in MiB. A name containing commas is kept whole (the last
// four fields are fixed). Malformed lines, repeated indexes and absurd
// sizes are skipped and counted; "[N/A]" or "[Not Supported]" memory
// reads as 0 and utilisation as unknown. The GPUs are sorted by index.
func parseNvidiaSMI(data []byte) (nvidiaResult, error) {
	if len(data) > MaxNvidiaSMIOutputBytes {
		return nvidiaResult{}, fmt.Errorf("nvidia-smi output is larger than %d bytes", MaxNvidiaSMIOutputBytes)
	}
	var r nvidiaResult
	seen := make(map[int]bool)
	for len(data) > 0 {
		var line []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			line, data = data, nil
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		g, ok := parseGPULine(line)
		if !ok || seen[g.Index] {
			r.skipped++
			continue
		}
		if len(r.gpus) >= MaxGPUs {
			r.dropped++
			continue
		}
		seen[g.Index] = true
		r.gpus = append(r.gpus, g)
	}
	sort.Slice(r.gpus, func(i, j int) bool { return r.gpus[i].Index < r.gpus[j].Index })
	return r, nil
}

// parseGPULine decodes one trimmed, non-empty line of nvidia-smi output.
func parseGPULine(line []byte) (gpuReading, bool) {
	if len(line) > MaxLineBytes {
		return gpuReading{}, false
	}
	fields := strings.Split(string(line), ",")
	n := len(fields)
	if n < 6 {
		return gpuReading{}, false
	}
	// The name is the raw text between the first field and the last
	// four, so commas and spaces inside it are kept as reported.
	name := strings.TrimSpace(strings.Join(fields[1:n-4], ","))
	for i := range fields {
		fields[i] = strings.TrimSpace(fields[i])
	}
	idx, err := strconv.Atoi(fields[0])
	if err != nil || idx < 0 || idx >= MaxGPUIndex {
		return gpuReading{}, false
	}
	uuid := fields[n-4]
	if notAvailable(uuid) {
		uuid = ""
	}
	if len(uuid) > MaxGPUUUIDBytes || !grammar.PrintableASCII(uuid) {
		return gpuReading{}, false
	}
	total, ok := parseMiB(fields[n-3])
	if !ok {
		return gpuReading{}, false
	}
	free, ok := parseMiB(fields[n-2])
	if !ok {
		return gpuReading{}, false
	}
	util := -1
	if s := fields[n-1]; !notAvailable(s) {
		u, err := strconv.Atoi(s)
		if err != nil || u < 0 || u > 100 {
			return gpuReading{}, false
		}
		util = u
	}
	return gpuReading{
		GPU: GPU{
			Index:          idx,
			Name:           truncateUTF8(name, MaxGPUNameBytes),
			UUID:           uuid,
			VRAMTotalBytes: total,
			VRAMFreeBytes:  min(free, total),
		},
		util: util,
	}, true
}

// parseMiB decodes a memory field in MiB into bytes; unavailable reads as
// 0. ok is false for anything else that is not a number up to MaxVRAMMiB.
func parseMiB(s string) (uint64, bool) {
	if notAvailable(s) {
		return 0, true
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v > MaxVRAMMiB {
		return 0, false
	}
	return v << 20, true
}

func notAvailable(s string) bool {
	switch s {
	case "[N/A]", "N/A", "[Not Supported]", "[Unknown Error]":
		return true
	}
	return false
}

// parseSysctlBytes decodes the output of "sysctl -n hw.memsize": one
// decimal number of bytes, at most MaxMemBytes and not zero.
func parseSysctlBytes(data []byte) (uint64, error) {
	if len(data) > MaxLineBytes {
		return 0, fmt.Errorf("hw.memsize is longer than %d bytes", MaxLineBytes)
	}
	s := strings.TrimSpace(string(data))
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v == 0 || v > MaxMemBytes {
		return 0, fmt.Errorf("hw.memsize %q is not a memory size", clip(s))
	}
	return v, nil
}

// parseVMStat decodes macOS vm_stat output into the bytes that can be
// allocated without swapping: free plus inactive pages (what the kernel
// reclaims first), times the page size from the header line "Mach
// Virtual Memory Statistics: (page size of N bytes)". Lines longer than
// MaxLineBytes are ignored; the first occurrence of a key wins.
func parseVMStat(data []byte) (uint64, error) {
	if len(data) > MaxMeminfoBytes {
		return 0, fmt.Errorf("vm_stat output is larger than %d bytes", MaxMeminfoBytes)
	}
	const pageSizeOf = "(page size of "
	var pageSize, free, inactive uint64
	var haveFree, haveInactive bool
	for line := range strings.Lines(string(data)) {
		if len(line) > MaxLineBytes {
			continue
		}
		line = strings.TrimSpace(line)
		if i := strings.Index(line, pageSizeOf); i >= 0 && pageSize == 0 {
			num, _, _ := strings.Cut(line[i+len(pageSizeOf):], " ")
			if v, err := strconv.ParseUint(num, 10, 64); err == nil && v > 0 && v <= 1<<30 {
				pageSize = v
			}
			continue
		}
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(val), "."), 10, 64)
		if err != nil || v > MaxMemBytes {
			continue
		}
		switch {
		case key == "Pages free" && !haveFree:
			free, haveFree = v, true
		case key == "Pages inactive" && !haveInactive:
			inactive, haveInactive = v, true
		}
	}
	if pageSize == 0 || !haveFree {
		return 0, errors.New("vm_stat has no page size or no free pages")
	}
	// Each term is at most MaxMemBytes (2^52) pages of at most 2^30
	// bytes: compare before multiplying so nothing overflows.
	pages := free + inactive
	if pages > MaxMemBytes/pageSize {
		return 0, errors.New("vm_stat reports more memory than any machine has")
	}
	return pages * pageSize, nil
}

// parseVersion finds a version in what a runtime printed for --version:
// on the first line that says "version" (at most maxVersionLines lines
// looked at), the first word after it, skipping ':' and "is", when it is
// a grammar.ValidVersion holding a digit ("version: 4567 (3d1f2a)" gives
// "4567"; "ollama version is 0.5.7" gives "0.5.7"). It returns "" when
// there is none.
func parseVersion(out []byte) string {
	const maxVersionLines = 16
	n := 0
	for line := range strings.Lines(string(out)) {
		if n++; n > maxVersionLines {
			break
		}
		if len(line) > MaxLineBytes {
			continue
		}
		// ASCII-only lowering keeps every byte where it was: strings.ToLower
		// would turn invalid UTF-8 into longer replacement runes, and i
		// would no longer index line.
		i := strings.Index(asciiLower(line), "version")
		if i < 0 {
			continue
		}
		words := strings.Fields(strings.TrimLeft(line[i+len("version"):], ": \t"))
		if len(words) > 0 && words[0] == "is" {
			words = words[1:]
		}
		if len(words) == 0 {
			continue
		}
		v := strings.TrimRight(words[0], ",;")
		if grammar.ValidVersion(v) && strings.ContainsAny(v, "0123456789") {
			return v
		}
	}
	return ""
}

// asciiLower lowers A-Z only, byte for byte, so indexes into its result
// are indexes into s.
func asciiLower(s string) string {
	b := []byte(s)
	for j, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[j] = c + 'a' - 'A'
		}
	}
	return string(b)
}
