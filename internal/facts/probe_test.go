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
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nodeld/nodeld/internal/grammar"
)

// fakeMachine is a machine for Probe: files, executables on PATH and
// what the programs Probe runs answer.
type fakeMachine struct {
	files   map[string]string
	onPath  map[string]bool
	smiOut  string
	smiErr  error
	smiRuns int
	// smiBlock, when set, makes nvidia-smi wait for its ctx.
	smiBlock bool
	// outputs answer other programs, by path and arguments joined by
	// spaces ("/usr/sbin/sysctl -n hw.memsize"); a missing one fails.
	outputs map[string]string
	// runs counts the runs of other programs, by the same key.
	runs map[string]int
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
		Run: func(ctx context.Context, path string, args []string, stderr bool) ([]byte, error) {
			if path == "/usr/bin/nvidia-smi" {
				m.smiRuns++
				if strings.Join(args, " ") != strings.Join(NvidiaSMIArgs(), " ") || stderr {
					return nil, errors.New("wrong nvidia-smi arguments")
				}
				if m.smiBlock {
					<-ctx.Done()
					return nil, ctx.Err()
				}
				return []byte(m.smiOut), m.smiErr
			}
			key := strings.Join(append([]string{path}, args...), " ")
			if m.runs == nil {
				m.runs = map[string]int{}
			}
			m.runs[key]++
			out, ok := m.outputs[key]
			if !ok {
				return nil, errors.New("exit status 1")
			}
			return []byte(out), nil
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
				m.smiOut = "No devices were found\n0, X, GPU-1, 10, 5, 0\n"
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
			// TestProbeCapabilities checks the records.
			if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(Facts{}, "Capabilities")); diff != "" {
				t.Errorf("Probe (-want +got):\n%s", diff)
			}
			got.NodeID = "n-0"
			if err := got.Validate(); err != nil {
				t.Errorf("probed facts do not validate: %v", err)
			}
		})
	}
}

// realVMStat is vm_stat output of a 16 KiB-page Mac.
const realVMStat = `Mach Virtual Memory Statistics: (page size of 16384 bytes)
Pages free:                                3000.
Pages active:                            200000.
Pages inactive:                          100000.
Pages speculative:                         2000.
Pages throttled:                              0.
Pages wired down:                        150000.
Pages purgeable:                           1000.
"Translation faults":                 987654321.
Pages copy-on-write:                    1234567.
Pages zero filled:                    123456789.
Pages reactivated:                       123456.
Pages purged:                             12345.
File-backed pages:                        90000.
Anonymous pages:                         210000.
Pages stored in compressor:              300000.
Pages occupied by compressor:            100000.
Decompressions:                          111111.
Compressions:                            222222.
Pageins:                                 333333.
Pageouts:                                  4444.
Swapins:                                      0.
Swapouts:                                     0.
`

// macMachine is a Mac: sysctl and vm_stat answer, /proc does not exist.
func macMachine(t *testing.T, arch string) (*fakeMachine, ProbeDeps) {
	m := linuxMachine()
	m.outputs = map[string]string{
		SysctlPath + " -n hw.memsize":               "34359738368\n",
		SysctlPath + " -n machdep.cpu.brand_string": "Apple M2 Max\n",
		VMStatPath: realVMStat,
	}
	d := m.deps()
	d.GOOS, d.GOARCH = "darwin", arch
	d.ReadFile = func(path string) ([]byte, error) {
		t.Errorf("ReadFile(%q) on darwin", path)
		return nil, fs.ErrNotExist
	}
	return m, d
}

func TestProbeDarwin(t *testing.T) {
	const avail = (3000 + 100000) * 16384
	tests := []struct {
		name  string
		arch  string
		setup func(m *fakeMachine)
		want  Facts
	}{
		{
			name: "apple silicon",
			arch: "arm64",
			want: Facts{Hostname: "gpu-1", OS: "darwin", Arch: "arm64", CPUs: 16, Runtimes: []string{grammar.RuntimeProcess},
				MemTotalBytes: 32 << 30, MemFreeBytes: avail},
		},
		{
			name: "intel mac asks no chip name",
			arch: "amd64",
			setup: func(m *fakeMachine) {
				delete(m.outputs, SysctlPath+" -n machdep.cpu.brand_string")
			},
			want: Facts{Hostname: "gpu-1", OS: "darwin", Arch: "amd64", CPUs: 16, Runtimes: []string{grammar.RuntimeProcess},
				MemTotalBytes: 32 << 30, MemFreeBytes: avail},
		},
		{
			name:  "sysctl failing is a note",
			arch:  "arm64",
			setup: func(m *fakeMachine) { m.outputs = nil },
			want: Facts{Hostname: "gpu-1", OS: "darwin", Arch: "arm64", CPUs: 16, Runtimes: []string{grammar.RuntimeProcess},
				Notes: []Note{{Probe: ProbeSysctl, Message: "exit status 1"}}},
		},
		{
			name:  "vm_stat junk is a note",
			arch:  "arm64",
			setup: func(m *fakeMachine) { m.outputs[VMStatPath] = "Pages free: 12.\n" },
			want: Facts{Hostname: "gpu-1", OS: "darwin", Arch: "arm64", CPUs: 16, Runtimes: []string{grammar.RuntimeProcess},
				MemTotalBytes: 32 << 30, Notes: []Note{{Probe: ProbeVMStat, Message: "vm_stat has no page size or no free pages"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, d := macMachine(t, tt.arch)
			if tt.setup != nil {
				tt.setup(m)
			}
			got, err := Probe(context.Background(), d, nil)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreFields(Facts{}, "Capabilities")); diff != "" {
				t.Errorf("Probe (-want +got):\n%s", diff)
			}
			if tt.arch != "arm64" && m.runs[SysctlPath+" -n machdep.cpu.brand_string"] != 0 {
				t.Error("asked an Intel Mac for its Apple chip")
			}
		})
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
	run := d.Run
	d.Run = func(c context.Context, path string, args []string, stderr bool) ([]byte, error) {
		cancel()
		return run(c, path, args, stderr)
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
