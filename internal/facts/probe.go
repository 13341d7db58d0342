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
	// RunNvidiaSMI runs the nvidia-smi found at path with the GPU query
	// (NvidiaSMIArgs()) and returns its stdout. Probe bounds ctx by
	// NvidiaSMITimeout.
	RunNvidiaSMI func(ctx context.Context, path string) ([]byte, error)
	// Hostname returns the host name, as os.Hostname.
	Hostname func() (string, error)
	// NumCPU returns the usable logical CPUs, as runtime.NumCPU.
	NumCPU func() int
	// GOOS and GOARCH name the OS and architecture.
	GOOS, GOARCH string
}

// NvidiaSMIArgs returns the arguments of the GPU query: one CSV line per
// GPU (index, name, uuid, memory.total, memory.free), memory in MiB.
func NvidiaSMIArgs() []string {
	return []string{
		"--query-gpu=index,name,uuid,memory.total,memory.free",
		"--format=csv,noheader,nounits",
	}
}

// Paths Probe reads through ProbeDeps.ReadFile on Linux.
const (
	MeminfoPath   = "/proc/meminfo"
	OSReleasePath = "/proc/sys/kernel/osrelease"
)

// DefaultProbeDeps returns ProbeDeps that read the real machine.
func DefaultProbeDeps() ProbeDeps {
	return ProbeDeps{
		ReadFile:     readFileBounded,
		LookPath:     exec.LookPath,
		RunNvidiaSMI: runNvidiaSMI,
		Hostname:     os.Hostname,
		NumCPU:       runtime.NumCPU,
		GOOS:         runtime.GOOS,
		GOARCH:       runtime.GOARCH,
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

func runNvidiaSMI(ctx context.Context, path string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, path, NvidiaSMIArgs()...)
	out := &capWriter{max: MaxNvidiaSMIOutputBytes}
	cmd.Stdout = out
	// A grandchild holding stdout open must not keep Wait forever.
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		return nil, err
	}
	if out.overflow {
		return nil, fmt.Errorf("nvidia-smi: %w (more than %d bytes)", errOutputTooLarge, MaxNvidiaSMIOutputBytes)
	}
	return out.buf.Bytes(), nil
}

// runtimeBinaries maps a runtime kind to the executable that reveals it.
func runtimeBinaries() []struct{ kind, binary string } {
	return []struct{ kind, binary string }{
		{grammar.RuntimeLlamaCpp, "llama-server"},
		{grammar.RuntimeOllama, "ollama"},
		{grammar.RuntimeMLXLM, "mlx_lm.server"},
	}
}

// errIncompleteDeps is returned for ProbeDeps with an unset field.
var errIncompleteDeps = errors.New("probe deps have an unset field")

func (d *ProbeDeps) validate() error {
	if d.ReadFile == nil || d.LookPath == nil || d.RunNvidiaSMI == nil ||
		d.Hostname == nil || d.NumCPU == nil || d.GOOS == "" || d.GOARCH == "" {
		return errIncompleteDeps
	}
	return nil
}

// Probe reads the machine through deps and returns its facts, with labels
// copied in and NodeID left empty (Sign fills it). A sub-probe that fails
// leaves its fields zero and adds a Note; Probe fails only for invalid
// labels, missing deps, or a done ctx.
func Probe(ctx context.Context, deps ProbeDeps, labels map[string]string) (Facts, error) {
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
	if len(labels) > 0 {
		f.Labels = maps.Clone(labels)
	}
	if h, err := deps.Hostname(); err != nil {
		f.note(ProbeHostname, err.Error())
	} else {
		f.Hostname = truncateUTF8(strings.TrimSpace(h), MaxShortStringBytes)
	}

	if deps.GOOS == "linux" {
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
	}

	for _, rb := range runtimeBinaries() {
		if _, err := deps.LookPath(rb.binary); err == nil {
			f.Runtimes = append(f.Runtimes, rb.kind)
		}
	}
	sort.Strings(f.Runtimes)

	if path, err := deps.LookPath("nvidia-smi"); err == nil {
		// Its absence is normal; its failure is worth a note.
		if err := probeGPUs(ctx, deps, path, &f); err != nil {
			return Facts{}, err
		}
	}
	return f, nil
}

// probeGPUs runs nvidia-smi and fills f.GPUs. It returns an error only
// when ctx itself is done.
func probeGPUs(ctx context.Context, deps ProbeDeps, path string, f *Facts) error {
	runCtx, cancel := context.WithTimeout(ctx, NvidiaSMITimeout)
	defer cancel()
	out, err := deps.RunNvidiaSMI(runCtx, path)
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if err != nil {
		if runCtx.Err() != nil {
			f.note(ProbeNvidiaSMI, fmt.Sprintf("timed out after %s", NvidiaSMITimeout))
		} else {
			f.note(ProbeNvidiaSMI, err.Error())
		}
		return nil
	}
	r, err := parseNvidiaSMI(out)
	if err != nil {
		f.note(ProbeNvidiaSMI, err.Error())
		return nil
	}
	f.GPUs = r.gpus
	if r.skipped > 0 {
		f.note(ProbeNvidiaSMI, fmt.Sprintf("skipped %d malformed lines", r.skipped))
	}
	if r.dropped > 0 {
		f.note(ProbeNvidiaSMI, fmt.Sprintf("dropped %d GPUs beyond %d", r.dropped, MaxGPUs))
	}
	return nil
}

// note appends a bounded note; past MaxNotes notes are dropped.
func (f *Facts) note(probe, msg string) {
	if len(f.Notes) >= MaxNotes {
		return
	}
	f.Notes = append(f.Notes, Note{Probe: probe, Message: truncateUTF8(msg, MaxNoteBytes)})
}
