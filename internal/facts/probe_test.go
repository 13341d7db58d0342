package facts

import (
	"context"
	"errors"
	"io/fs"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/grammar"
)

// fakeMachine is a machine for Probe: files, executables on PATH and the
// nvidia-smi answer.
type fakeMachine struct {
	files   map[string]string
	onPath  map[string]bool
	smiOut  string
	smiErr  error
	smiRuns int
	// smiBlock, when set, makes nvidia-smi wait for its ctx.
	smiBlock bool
}

func (m *fakeMachine) deps() ProbeDeps {
	return ProbeDeps{
		ReadFile: func(path string) ([]byte, error) {
			s, ok := m.files[path]
			if !ok {
				return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
			}
			return []byte(s), nil
		},
		LookPath: func(file string) (string, error) {
			if m.onPath[file] {
				return "/usr/bin/" + file, nil
			}
			return "", errors.New("executable file not found in $PATH")
		},
		RunNvidiaSMI: func(ctx context.Context, path string) ([]byte, error) {
			m.smiRuns++
			if path != "/usr/bin/nvidia-smi" {
				return nil, errors.New("wrong path " + path)
			}
			if m.smiBlock {
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return []byte(m.smiOut), m.smiErr
		},
		Hostname: func() (string, error) { return "gpu-1", nil },
		NumCPU:   func() int { return 16 },
		GOOS:     "linux",
		GOARCH:   "amd64",
	}
}

func linuxMachine() *fakeMachine {
	return &fakeMachine{
		files: map[string]string{
			MeminfoPath:   realMeminfo,
			OSReleasePath: "6.8.0-45-generic\n",
		},
		onPath: map[string]bool{},
	}
}

func TestProbe(t *testing.T) {
	const mib = 1 << 20
	base := Facts{
		Hostname:      "gpu-1",
		OS:            "linux",
		Arch:          "amd64",
		Kernel:        "6.8.0-45-generic",
		CPUs:          16,
		MemTotalBytes: 24684092 * 1024,
		MemFreeBytes:  24254004 * 1024,
		Runtimes:      []string{grammar.RuntimeProcess},
	}
	tests := []struct {
		name   string
		setup  func(m *fakeMachine)
		labels map[string]string
		want   func(f *Facts)
	}{
		{name: "bare linux", want: func(*Facts) {}},
		{
			name:   "labels are copied",
			labels: map[string]string{"rack": "a", "zone": "eu-1"},
			want:   func(f *Facts) { f.Labels = map[string]string{"rack": "a", "zone": "eu-1"} },
		},
		{
			name: "runtimes found on PATH",
			setup: func(m *fakeMachine) {
				m.onPath["llama-server"] = true
				m.onPath["ollama"] = true
				m.onPath["mlx_lm.server"] = true
				m.onPath["vllm"] = true
			},
			want: func(f *Facts) {
				f.Runtimes = []string{grammar.RuntimeLlamaCpp, grammar.RuntimeMLXLM, grammar.RuntimeOllama, grammar.RuntimeProcess}
			},
		},
		{
			name:  "one runtime",
			setup: func(m *fakeMachine) { m.onPath["ollama"] = true },
			want:  func(f *Facts) { f.Runtimes = []string{grammar.RuntimeOllama, grammar.RuntimeProcess} },
		},
		{
			name: "gpus from nvidia-smi",
			setup: func(m *fakeMachine) {
				m.onPath["nvidia-smi"] = true
				m.smiOut = realNvidiaSMI
			},
			want: func(f *Facts) {
				f.GPUs = []GPU{
					{Index: 0, Name: "NVIDIA GeForce RTX 4090", UUID: "GPU-5f1b6d3c-2a6e-4f0e-9d8e-6a1c2b3d4e5f", VRAMTotalBytes: 24564 * mib, VRAMFreeBytes: 23987 * mib},
					{Index: 1, Name: "NVIDIA A100-SXM4-80GB", UUID: "GPU-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d", VRAMTotalBytes: 81920 * mib, VRAMFreeBytes: 1024 * mib},
				}
			},
		},
		{
			name: "nvidia-smi failing is a note",
			setup: func(m *fakeMachine) {
				m.onPath["nvidia-smi"] = true
				m.smiErr = errors.New("exit status 9")
			},
			want: func(f *Facts) { f.Notes = []Note{{Probe: ProbeNvidiaSMI, Message: "exit status 9"}} },
		},
		{
			name: "nvidia-smi junk is noted",
			setup: func(m *fakeMachine) {
				m.onPath["nvidia-smi"] = true
				m.smiOut = "No devices were found\n0, X, GPU-1, 10, 5\n"
			},
			want: func(f *Facts) {
				f.GPUs = []GPU{{Index: 0, Name: "X", UUID: "GPU-1", VRAMTotalBytes: 10 * mib, VRAMFreeBytes: 5 * mib}}
				f.Notes = []Note{{Probe: ProbeNvidiaSMI, Message: "skipped 1 malformed lines"}}
			},
		},
		{
			name:  "missing /proc files are notes",
			setup: func(m *fakeMachine) { m.files = nil },
			want: func(f *Facts) {
				f.MemTotalBytes, f.MemFreeBytes, f.Kernel = 0, 0, ""
				f.Notes = []Note{
					{Probe: ProbeMeminfo, Message: "open /proc/meminfo: file does not exist"},
					{Probe: ProbeKernel, Message: "open /proc/sys/kernel/osrelease: file does not exist"},
				}
			},
		},
		{
			name:  "garbage meminfo is a note",
			setup: func(m *fakeMachine) { m.files[MeminfoPath] = "MemTotal: lots\n" },
			want: func(f *Facts) {
				f.MemTotalBytes, f.MemFreeBytes = 0, 0
				f.Notes = []Note{{Probe: ProbeMeminfo, Message: errNoMemTotal.Error()}}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := linuxMachine()
			if tt.setup != nil {
				tt.setup(m)
			}
			got, err := Probe(context.Background(), m.deps(), tt.labels)
			if err != nil {
				t.Fatalf("Probe: %v", err)
			}
			want := base
			want.Runtimes = []string{grammar.RuntimeProcess}
			tt.want(&want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Probe (-want +got):\n%s", diff)
			}
			got.NodeID = "n-0"
			if err := got.Validate(); err != nil {
				t.Errorf("probed facts do not validate: %v", err)
			}
		})
	}
}

func TestProbeNonLinuxReadsNoProc(t *testing.T) {
	m := linuxMachine()
	d := m.deps()
	d.GOOS, d.GOARCH = "darwin", "arm64"
	d.ReadFile = func(path string) ([]byte, error) {
		t.Errorf("ReadFile(%q) on darwin", path)
		return nil, fs.ErrNotExist
	}
	got, err := Probe(context.Background(), d, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Facts{Hostname: "gpu-1", OS: "darwin", Arch: "arm64", CPUs: 16, Runtimes: []string{grammar.RuntimeProcess}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Probe (-want +got):\n%s", diff)
	}
}

func TestProbeNvidiaSMITimeoutIsANote(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := linuxMachine()
		m.onPath["nvidia-smi"] = true
		m.smiBlock = true
		start := time.Now()
		got, err := Probe(context.Background(), m.deps(), nil)
		if err != nil {
			t.Fatalf("Probe: %v", err)
		}
		if waited := time.Since(start); waited != NvidiaSMITimeout {
			t.Errorf("Probe waited %s for nvidia-smi, want %s", waited, NvidiaSMITimeout)
		}
		want := []Note{{Probe: ProbeNvidiaSMI, Message: "timed out after 5s"}}
		if diff := cmp.Diff(want, got.Notes); diff != "" {
			t.Errorf("notes (-want +got):\n%s", diff)
		}
		if len(got.GPUs) != 0 {
			t.Errorf("GPUs = %+v, want none", got.GPUs)
		}
	})
}

func TestProbeCancelled(t *testing.T) {
	m := linuxMachine()
	m.onPath["nvidia-smi"] = true
	m.smiBlock = true
	ctx, cancel := context.WithCancel(context.Background())
	d := m.deps()
	run := d.RunNvidiaSMI
	d.RunNvidiaSMI = func(c context.Context, path string) ([]byte, error) {
		cancel()
		return run(c, path)
	}
	if _, err := Probe(ctx, d, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Probe error = %v, want context.Canceled", err)
	}
}

func TestProbeRefuses(t *testing.T) {
	tests := []struct {
		name   string
		deps   func(d *ProbeDeps)
		labels map[string]string
	}{
		{name: "tier label", labels: map[string]string{"tier": "gold"}},
		{name: "trust label", labels: map[string]string{"trust.level": "high"}},
		{name: "bad label key", labels: map[string]string{"Rack": "a"}},
		{name: "bad label value", labels: map[string]string{"rack": "a\n"}},
		{name: "long label value", labels: map[string]string{"rack": strings.Repeat("a", grammar.MaxLabelValueLen+1)}},
		{name: "missing dep", deps: func(d *ProbeDeps) { d.LookPath = nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := linuxMachine().deps()
			if tt.deps != nil {
				tt.deps(&d)
			}
			if _, err := Probe(context.Background(), d, tt.labels); err == nil {
				t.Fatal("Probe accepted it")
			}
		})
	}
}

func TestProbeRealMachine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), NvidiaSMITimeout+5*time.Second)
	defer cancel()
	f, err := Probe(ctx, DefaultProbeDeps(), map[string]string{"rack": "a"})
	if err != nil {
		t.Fatalf("Probe: %v", err)
	}
	if f.CPUs <= 0 {
		t.Errorf("CPUs = %d, want > 0", f.CPUs)
	}
	if f.OS != runtime.GOOS || f.Arch != runtime.GOARCH {
		t.Errorf("OS/Arch = %s/%s", f.OS, f.Arch)
	}
	if runtime.GOOS == "linux" {
		if f.MemTotalBytes == 0 || f.MemFreeBytes > f.MemTotalBytes {
			t.Errorf("memory total %d free %d", f.MemTotalBytes, f.MemFreeBytes)
		}
	}
	f.NodeID = "n-0"
	if err := f.Validate(); err != nil {
		t.Errorf("real facts do not validate: %v", err)
	}
}
