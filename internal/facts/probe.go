package facts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/nodeld/nodeld/internal/grammar"
)

// ProbeDeps are the machine as Probe sees it. Tests replace any of them.
type ProbeDeps struct {
	// ReadFile reads a /proc file. The decoders refuse oversized input,
	// so it need not read more than MaxMeminfoBytes+1 bytes; the default
	// stops there.
	ReadFile func(path string) ([]byte, error)
	// LookPath finds an executable on PATH, as exec.LookPath.
	LookPath func(file string) (string, error)
	// Run runs the program at path with args and returns what it wrote
	// to stdout, and to stderr as well (interleaved) when stderr is true:
	// at most MaxCommandOutputBytes, more is an error. It must return once
	// ctx is done; Probe bounds ctx for each command (NvidiaSMITimeout,
	// CommandTimeout, RuntimeVersionTimeout).
	Run func(ctx context.Context, path string, args []string, stderr bool) ([]byte, error)
	// Hostname returns the host name, as os.Hostname.
	Hostname func() (string, error)
	// NumCPU returns the usable logical CPUs, as runtime.NumCPU.
	NumCPU func() int
	// GOOS and GOARCH name the OS and architecture.
	GOOS, GOARCH string
}

// NvidiaSMIArgs returns the arguments of the GPU query: one CSV line per
// GPU (index, name, uuid, memory.total, memory.free, utilization.gpu),
// memory in MiB, utilisation in percent.
func NvidiaSMIArgs() []string {
	return []string{
		"--query-gpu=index,name,uuid,memory.total,memory.free,utilization.gpu",
		"--format=csv,noheader,nounits",
	}
}

// Paths Probe reads through ProbeDeps.ReadFile on Linux, and the
// programs it runs through ProbeDeps.Run on macOS (by absolute path: a
// service's PATH may lack /usr/sbin).
const (
	MeminfoPath   = "/proc/meminfo"
	OSReleasePath = "/proc/sys/kernel/osrelease"
	SysctlPath    = "/usr/sbin/sysctl"
	VMStatPath    = "/usr/bin/vm_stat"
)

// DefaultProbeDeps returns ProbeDeps that read the real machine.
func DefaultProbeDeps() ProbeDeps {
	return ProbeDeps{
		ReadFile: readFileBounded,
		LookPath: exec.LookPath,
		Run:      runCommand,
		Hostname: os.Hostname,
		NumCPU:   runtime.NumCPU,
		GOOS:     runtime.GOOS,
		GOARCH:   runtime.GOARCH,
	}
}

// readFileBounded reads at most MaxMeminfoBytes+1 bytes, so a decoder can
// tell an oversized file from one that fits.
func readFileBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, MaxMeminfoBytes+1))
}

// errOutputTooLarge is returned when a child's output passes its bound.
var errOutputTooLarge = errors.New("output too large")

// capWriter keeps at most max bytes and remembers that more came.
type capWriter struct {
	buf      bytes.Buffer
	max      int
	overflow bool
}

func (w *capWriter) Write(p []byte) (int, error) {
	if room := w.max - w.buf.Len(); len(p) > room {
		w.overflow = true
		if room > 0 {
			w.buf.Write(p[:room])
		}
		return len(p), nil
	}
	return w.buf.Write(p)
}

// runCommand is the default ProbeDeps.Run.
func runCommand(ctx context.Context, path string, args []string, stderr bool) ([]byte, error) {
	cmd := exec.CommandContext(ctx, path, args...)
	out := &capWriter{max: MaxCommandOutputBytes}
	cmd.Stdout = out
	if stderr {
		// The same writer: exec then uses one pipe and one copier.
		cmd.Stderr = out
	}
	// A grandchild holding stdout open must not keep Wait forever.
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		return nil, err
	}
	if out.overflow {
		return nil, fmt.Errorf("%s: %w (more than %d bytes)", filepath.Base(path), errOutputTooLarge, MaxCommandOutputBytes)
	}
	return out.buf.Bytes(), nil
}

// runtimeBinary is an executable that reveals a runtime kind on PATH.
type runtimeBinary struct {
	kind   string // grammar runtime name
	binary string
	// version, when set, are the arguments that make the binary print its
	// version and exit quickly. mlx_lm.server has none: starting Python
	// and importing MLX to learn a version is not cheap.
	version []string
}

// runtimeBinaries lists the runtimes Probe looks for.
func runtimeBinaries() []runtimeBinary {
	return []runtimeBinary{
		{kind: grammar.RuntimeLlamaCpp, binary: "llama-server", version: []string{"--version"}},
		{kind: grammar.RuntimeOllama, binary: "ollama", version: []string{"--version"}},
		{kind: grammar.RuntimeMLXLM, binary: "mlx_lm.server"},
	}
}

// errIncompleteDeps is returned for ProbeDeps with an unset field.
var errIncompleteDeps = errors.New("probe deps have an unset field")

func (d *ProbeDeps) validate() error {
	if d.ReadFile == nil || d.LookPath == nil || d.Run == nil ||
		d.Hostname == nil || d.NumCPU == nil || d.GOOS == "" || d.GOARCH == "" {
		return errIncompleteDeps
	}
	return nil
}

// probed is what Probe learns beyond the fields of Facts, for the
// capability records.
type probed struct {
	gpuUtil   map[int]int       // nvidia GPU index -> utilisation percent, when reported
	versions  map[string]string // runtime kind -> version, when known
	appleChip string            // the chip's name on Apple silicon ("Apple M2 Max")
	amd       []gpuReading      // AMD GPUs rocm-smi reported
	displays  []displayGPU      // a Mac's GPUs system_profiler reported
}

// Probe reads the machine through deps and returns its facts, with labels
// copied in and NodeID left empty (Sign fills it). Its capability records
// describe the CPU, OS, memory, GPUs, runtimes and labels (see
// capabilities). A sub-probe that fails leaves its fields zero and adds a
// Note; Probe fails only for invalid labels, missing deps, or a done ctx.
func Probe(ctx context.Context, deps ProbeDeps, labels map[string]string) (Facts, error) {
	return probe(ctx, deps, labels, nil)
}

// probe is Probe with a cache of runtime versions (nil: ask every time).
func probe(ctx context.Context, deps ProbeDeps, labels map[string]string, versions *versionCache) (Facts, error) {
	if err := deps.validate(); err != nil {
		return Facts{}, err
	}
	if err := ValidateLabels(labels); err != nil {
		return Facts{}, fmt.Errorf("probe labels: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return Facts{}, err
	}
	f := Facts{
		OS:       truncateUTF8(deps.GOOS, MaxShortStringBytes),
		Arch:     truncateUTF8(deps.GOARCH, MaxShortStringBytes),
		CPUs:     min(max(deps.NumCPU(), 0), MaxCPUs),
		Runtimes: []string{grammar.RuntimeProcess},
	}
	var p probed
	if len(labels) > 0 {
		f.Labels = maps.Clone(labels)
	}
	if h, err := deps.Hostname(); err != nil {
		f.note(ProbeHostname, err.Error())
	} else {
		f.Hostname = truncateUTF8(strings.TrimSpace(h), MaxShortStringBytes)
	}

	switch deps.GOOS {
	case "linux":
		if data, err := deps.ReadFile(MeminfoPath); err != nil {
			f.note(ProbeMeminfo, err.Error())
		} else if m, err := parseMeminfo(data); err != nil {
			f.note(ProbeMeminfo, err.Error())
		} else {
			f.MemTotalBytes, f.MemFreeBytes = m.total, m.available
		}
		if data, err := deps.ReadFile(OSReleasePath); err != nil {
			f.note(ProbeKernel, err.Error())
		} else if len(data) > MaxKernelFileBytes {
			f.note(ProbeKernel, "osrelease is too large")
		} else {
			f.Kernel = truncateUTF8(strings.TrimSpace(string(data)), MaxShortStringBytes)
		}
	case "darwin":
		if err := probeDarwin(ctx, deps, &f, &p); err != nil {
			return Facts{}, err
		}
	}

	var found []runtimeBinary
	paths := map[string]string{}
	for _, rb := range runtimeBinaries() {
		if path, err := deps.LookPath(rb.binary); err == nil {
			f.Runtimes = append(f.Runtimes, rb.kind)
			found = append(found, rb)
			paths[rb.kind] = path
		}
	}
	sort.Strings(f.Runtimes)
	for _, rb := range found {
		if len(rb.version) == 0 {
			continue
		}
		v, err := runtimeVersion(ctx, deps, paths[rb.kind], rb.version, versions)
		if err != nil {
			return Facts{}, err
		}
		if v != "" {
			if p.versions == nil {
				p.versions = map[string]string{}
			}
			p.versions[rb.kind] = v
		}
	}

	if path, err := deps.LookPath("nvidia-smi"); err == nil {
		// Its absence is normal; its failure is worth a note.
		if err := probeGPUs(ctx, deps, path, &f, &p); err != nil {
			return Facts{}, err
		}
	}
	if path, err := deps.LookPath("rocm-smi"); err == nil {
		if err := probeROCm(ctx, deps, path, &f, &p); err != nil {
			return Facts{}, err
		}
	}
	if deps.GOOS == "darwin" {
		if _, err := deps.LookPath(SystemProfilerPath); err == nil {
			if err := probeDisplays(ctx, deps, versions, &f, &p); err != nil {
				return Facts{}, err
			}
		}
	}
	f.Capabilities = capabilities(&f, &p)
	return f, nil
}

// runWithin runs a command through deps.Run under its own timeout. A
// timeout is reported as such; the caller checks ctx itself.
func runWithin(ctx context.Context, deps ProbeDeps, timeout time.Duration, path string, args []string, stderr bool) ([]byte, error) {
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := deps.Run(runCtx, path, args, stderr)
	if err != nil && runCtx.Err() != nil && ctx.Err() == nil {
		return nil, fmt.Errorf("timed out after %s", timeout)
	}
	return out, err
}

// probeGPUs runs nvidia-smi and fills f.GPUs and the utilisation in p. It
// returns an error only when ctx itself is done.
func probeGPUs(ctx context.Context, deps ProbeDeps, path string, f *Facts, p *probed) error {
	out, err := runWithin(ctx, deps, NvidiaSMITimeout, path, NvidiaSMIArgs(), false)
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if err != nil {
		f.note(ProbeNvidiaSMI, err.Error())
		return nil
	}
	r, err := parseNvidiaSMI(out)
	if err != nil {
		f.note(ProbeNvidiaSMI, err.Error())
		return nil
	}
	for _, g := range r.gpus {
		f.GPUs = append(f.GPUs, g.GPU)
		if g.util >= 0 {
			if p.gpuUtil == nil {
				p.gpuUtil = map[int]int{}
			}
			p.gpuUtil[g.Index] = g.util
		}
	}
	f.noteGPUParse(ProbeNvidiaSMI, "lines", r.skipped, r.dropped)
	return nil
}

// probeDarwin reads memory through sysctl and vm_stat, and on Apple
// silicon the chip's name. It returns an error only when ctx is done.
func probeDarwin(ctx context.Context, deps ProbeDeps, f *Facts, p *probed) error {
	out, err := runWithin(ctx, deps, CommandTimeout, SysctlPath, []string{"-n", "hw.memsize"}, false)
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if err != nil {
		f.note(ProbeSysctl, err.Error())
		return nil
	}
	total, err := parseSysctlBytes(out)
	if err != nil {
		f.note(ProbeSysctl, err.Error())
		return nil
	}
	f.MemTotalBytes = total
	out, err = runWithin(ctx, deps, CommandTimeout, VMStatPath, nil, false)
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if err != nil {
		f.note(ProbeVMStat, err.Error())
	} else if avail, err := parseVMStat(out); err != nil {
		f.note(ProbeVMStat, err.Error())
	} else {
		f.MemFreeBytes = min(avail, total)
	}
	if deps.GOARCH != "arm64" {
		return nil
	}
	out, err = runWithin(ctx, deps, CommandTimeout, SysctlPath, []string{"-n", "machdep.cpu.brand_string"}, false)
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if err != nil {
		f.note(ProbeSysctl, err.Error())
		return nil
	}
	if chip := strings.TrimSpace(string(out)); len(chip) <= MaxLineBytes && strings.HasPrefix(chip, "Apple") {
		p.appleChip = truncateUTF8(chip, MaxGPUNameBytes)
	}
	return nil
}

// runtimeVersion asks the runtime binary at path for its version, through
// the cache when there is one. An empty version is not an error; only a
// done ctx is.
func runtimeVersion(ctx context.Context, deps ProbeDeps, path string, args []string, cache *versionCache) (string, error) {
	if v, ok := cache.get(path); ok {
		return v, nil
	}
	out, err := runWithin(ctx, deps, RuntimeVersionTimeout, path, args, true)
	if ctxErr := ctx.Err(); ctxErr != nil {
		return "", ctxErr
	}
	v := ""
	if err == nil {
		v = parseVersion(out)
	}
	cache.put(path, v)
	return v, nil
}

// versionCache remembers what each runtime binary said its version was,
// by path, for RuntimeVersionMaxAge. A Source owns one and uses it only
// while it holds its probeSem, so it needs no lock of its own. A nil
// cache remembers nothing.
type versionCache struct {
	now     func() time.Time
	entries map[string]versionEntry
}

type versionEntry struct {
	version string
	at      time.Time
}

func (c *versionCache) get(path string) (string, bool) {
	if c == nil {
		return "", false
	}
	e, ok := c.entries[path]
	if !ok {
		return "", false
	}
	age := c.now().Sub(e.at)
	return e.version, age >= 0 && age < RuntimeVersionMaxAge
}

func (c *versionCache) put(path, version string) {
	if c == nil {
		return
	}
	if c.entries == nil {
		c.entries = map[string]versionEntry{}
	}
	c.entries[path] = versionEntry{version: version, at: c.now()}
}

// note appends a bounded note; past MaxNotes notes are dropped.
func (f *Facts) note(probe, msg string) {
	if len(f.Notes) >= MaxNotes {
		return
	}
	f.Notes = append(f.Notes, Note{Probe: probe, Message: truncateUTF8(msg, MaxNoteBytes)})
}
