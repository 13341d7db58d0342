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
	gpus    []GPU
	skipped int // malformed lines
	dropped int // valid GPUs beyond MaxGPUs
}

// parseNvidiaSMI decodes the output of nvidia-smi with NvidiaSMIArgs():
// "index, name, uuid, memory.total, memory.free" per line, memory in MiB.
// A name containing commas is kept whole (the last three fields are fixed).
// Malformed lines, repeated indexes and absurd sizes are skipped and
// counted; "[N/A]" or "[Not Supported]" memory reads as 0. The GPUs are
// sorted by index.
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
func parseGPULine(line []byte) (GPU, bool) {
	if len(line) > MaxLineBytes {
		return GPU{}, false
	}
	fields := strings.Split(string(line), ",")
	n := len(fields)
	if n < 5 {
		return GPU{}, false
	}
	// The name is the raw text between the first field and the last
	// three, so commas and spaces inside it are kept as reported.
	name := strings.TrimSpace(strings.Join(fields[1:n-3], ","))
	for i := range fields {
		fields[i] = strings.TrimSpace(fields[i])
	}
	idx, err := strconv.Atoi(fields[0])
	if err != nil || idx < 0 || idx >= MaxGPUIndex {
		return GPU{}, false
	}
	uuid := fields[n-3]
	if notAvailable(uuid) {
		uuid = ""
	}
	if len(uuid) > MaxGPUUUIDBytes || !grammar.PrintableASCII(uuid) {
		return GPU{}, false
	}
	total, ok := parseMiB(fields[n-2])
	if !ok {
		return GPU{}, false
	}
	free, ok := parseMiB(fields[n-1])
	if !ok {
		return GPU{}, false
	}
	return GPU{
		Index:          idx,
		Name:           truncateUTF8(name, MaxGPUNameBytes),
		UUID:           uuid,
		VRAMTotalBytes: total,
		VRAMFreeBytes:  min(free, total),
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
