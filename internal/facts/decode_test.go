package facts

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/grammar"
)

const realMeminfo = `MemTotal:       24684092 kB
MemFree:        22345072 kB
MemAvailable:   24254004 kB
Buffers:           71764 kB
Cached:          1994200 kB
SwapCached:            0 kB
Active:          1009572 kB
Inactive:        1092916 kB
HugePages_Total:       0
HugePages_Free:        0
Hugepagesize:       2048 kB
DirectMap1G:    23068672 kB
`

func TestParseMeminfo(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		want    meminfo
		wantErr bool
	}{
		{
			name: "real",
			give: realMeminfo,
			want: meminfo{total: 24684092 * 1024, available: 24254004 * 1024},
		},
		{
			name: "no trailing newline",
			give: "MemTotal: 1000 kB\nMemAvailable: 400 kB",
			want: meminfo{total: 1000 * 1024, available: 400 * 1024},
		},
		{
			name: "old kernel without MemAvailable sums free, buffers and cached",
			give: "MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 20 kB\nCached: 300 kB\n",
			want: meminfo{total: 1000 * 1024, available: 420 * 1024},
		},
		{
			name: "available above total is clamped",
			give: "MemTotal: 1000 kB\nMemAvailable: 5000 kB\n",
			want: meminfo{total: 1000 * 1024, available: 1000 * 1024},
		},
		{
			name: "first occurrence wins",
			give: "MemTotal: 1000 kB\nMemTotal: 9 kB\nMemAvailable: 10 kB\nMemAvailable: 999 kB\n",
			want: meminfo{total: 1000 * 1024, available: 10 * 1024},
		},
		{
			name: "malformed lines are ignored",
			give: "garbage\nMemAvailable 5 kB\nMemAvailable: x kB\nMemAvailable: 5 MB\nMemAvailable: 5\n" +
				"MemAvailable: 1 2 kB\nMemTotal: 1000 kB\nMemAvailable: 7 kB\n",
			want: meminfo{total: 1000 * 1024, available: 7 * 1024},
		},
		{
			name: "absurd available is ignored",
			give: "MemTotal: 1000 kB\nMemAvailable: 18446744073709551615 kB\n",
			want: meminfo{total: 1000 * 1024},
		},
		{
			name: "overlong line is skipped",
			give: "MemTotal: " + strings.Repeat("1", MaxLineBytes) + " kB\nMemTotal: 8 kB\n",
			want: meminfo{total: 8 * 1024},
		},
		{name: "absurd total", give: "MemTotal: 9999999999999999 kB\n", wantErr: true},
		{name: "overflowing total", give: "MemTotal: 18446744073709551615 kB\n", wantErr: true},
		{name: "negative total", give: "MemTotal: -1 kB\n", wantErr: true},
		{name: "zero total", give: "MemTotal: 0 kB\n", wantErr: true},
		{name: "no total", give: "MemFree: 100 kB\n", wantErr: true},
		{name: "empty", give: "", wantErr: true},
		{name: "too large", give: realMeminfo + strings.Repeat("x", MaxMeminfoBytes), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMeminfo([]byte(tt.give))
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseMeminfo error = %v, want error %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(meminfo{})); diff != "" {
				t.Errorf("parseMeminfo (-want +got):\n%s", diff)
			}
		})
	}
}

const realNvidiaSMI = `0, NVIDIA GeForce RTX 4090, GPU-5f1b6d3c-2a6e-4f0e-9d8e-6a1c2b3d4e5f, 24564, 23987, 3
1, NVIDIA A100-SXM4-80GB, GPU-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d, 81920, 1024, 97
`

// readings are GPUs with unknown utilisation.
func readings(gpus ...GPU) []gpuReading {
	var out []gpuReading
	for _, g := range gpus {
		out = append(out, gpuReading{GPU: g, util: -1})
	}
	return out
}

func TestParseNvidiaSMI(t *testing.T) {
	const mib = 1 << 20
	rtx := GPU{Index: 0, Name: "NVIDIA GeForce RTX 4090", UUID: "GPU-5f1b6d3c-2a6e-4f0e-9d8e-6a1c2b3d4e5f",
		VRAMTotalBytes: 24564 * mib, VRAMFreeBytes: 23987 * mib}
	a100 := GPU{Index: 1, Name: "NVIDIA A100-SXM4-80GB", UUID: "GPU-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d",
		VRAMTotalBytes: 81920 * mib, VRAMFreeBytes: 1024 * mib}
	real := []gpuReading{{GPU: rtx, util: 3}, {GPU: a100, util: 97}}

	var many strings.Builder
	for i := range MaxGPUs + 3 {
		fmt.Fprintf(&many, "%d, GPU %d, GPU-%d, 1024, 512, [N/A]\n", i, i, i)
	}

	tests := []struct {
		name    string
		give    string
		want    nvidiaResult
		wantErr bool
	}{
		{name: "real", give: realNvidiaSMI, want: nvidiaResult{gpus: real}},
		{name: "empty", give: "", want: nvidiaResult{}},
		{
			name: "sorted by index, crlf and blank lines",
			give: "\r\n1, NVIDIA A100-SXM4-80GB, GPU-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d, 81920, 1024, 97\r\n\n" +
				"0, NVIDIA GeForce RTX 4090, GPU-5f1b6d3c-2a6e-4f0e-9d8e-6a1c2b3d4e5f, 24564, 23987, 3\r\n",
			want: nvidiaResult{gpus: real},
		},
		{
			name: "name with a comma",
			give: "0, Tesla, Model X, GPU-1, 100, 50, 0\n",
			want: nvidiaResult{gpus: []gpuReading{{GPU: GPU{Index: 0, Name: "Tesla, Model X", UUID: "GPU-1", VRAMTotalBytes: 100 * mib, VRAMFreeBytes: 50 * mib}, util: 0}}},
		},
		{
			name: "not available fields",
			give: "0, NVIDIA Jetson, [N/A], [N/A], [Not Supported], [Not Supported]\n",
			want: nvidiaResult{gpus: readings(GPU{Index: 0, Name: "NVIDIA Jetson"})},
		},
		{
			name: "free above total is clamped",
			give: "0, X, GPU-1, 100, 500, 100\n",
			want: nvidiaResult{gpus: []gpuReading{{GPU: GPU{Index: 0, Name: "X", UUID: "GPU-1", VRAMTotalBytes: 100 * mib, VRAMFreeBytes: 100 * mib}, util: 100}}},
		},
		{
			name: "malformed lines are skipped and counted",
			give: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n" +
				"x, X, GPU-1, 100, 50, 1\n" + // bad index
				"-1, X, GPU-1, 100, 50, 1\n" + // negative index
				"99999, X, GPU-1, 100, 50, 1\n" + // index too large
				"0, X, GPU-1, lots, 50, 1\n" + // bad total
				"0, X, GPU-1, 100, -5, 1\n" + // bad free
				"0, X, GPU-1, 99999999999, 50, 1\n" + // absurd total
				"0, X, GPU-\x01, 100, 50, 1\n" + // control byte in uuid
				"0, X, " + strings.Repeat("u", MaxGPUUUIDBytes+1) + ", 100, 50, 1\n" + // long uuid
				"0, " + strings.Repeat("n", MaxLineBytes) + ", GPU-1, 100, 50, 1\n" + // overlong line
				"0, X, 100, 50, 1\n" + // too few fields
				"0, X, GPU-1, 100, 50, 101\n" + // utilisation above 100
				"0, X, GPU-1, 100, 50, -1\n" + // negative utilisation
				"0, X, GPU-1, 100, 50, busy\n" + // utilisation not a number
				"0, X, GPU-1, 100, 50\n" + // the query of older nodes: one field short
				"0, X, GPU-1, 100, 50, 7\n" +
				"0, Y, GPU-2, 100, 50, 7\n", // repeated index
			want: nvidiaResult{
				gpus:    []gpuReading{{GPU: GPU{Index: 0, Name: "X", UUID: "GPU-1", VRAMTotalBytes: 100 * mib, VRAMFreeBytes: 50 * mib}, util: 7}},
				skipped: 16,
			},
		},
		{
			name: "long name is truncated",
			give: "0, " + strings.Repeat("é", MaxGPUNameBytes) + ", GPU-1, 1, 1, [N/A]\n",
			want: nvidiaResult{gpus: readings(GPU{Index: 0, Name: strings.Repeat("é", MaxGPUNameBytes/2), UUID: "GPU-1", VRAMTotalBytes: mib, VRAMFreeBytes: mib})},
		},
		{
			name: "too many GPUs",
			give: many.String(),
			want: func() nvidiaResult {
				r := nvidiaResult{dropped: 3}
				for i := range MaxGPUs {
					r.gpus = append(r.gpus, readings(GPU{Index: i, Name: fmt.Sprintf("GPU %d", i), UUID: fmt.Sprintf("GPU-%d", i),
						VRAMTotalBytes: 1024 * mib, VRAMFreeBytes: 512 * mib})...)
				}
				return r
			}(),
		},
		{name: "too large", give: strings.Repeat("\n", MaxNvidiaSMIOutputBytes+1), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseNvidiaSMI([]byte(tt.give))
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseNvidiaSMI error = %v, want error %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(nvidiaResult{}, gpuReading{})); diff != "" {
				t.Errorf("parseNvidiaSMI (-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzParseMeminfo(f *testing.F) {
	f.Add([]byte(realMeminfo))
	f.Add([]byte("MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 20 kB\nCached: 300 kB\n"))
	f.Add([]byte("MemTotal: 18446744073709551615 kB\nMemAvailable: 1 kB"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := parseMeminfo(data)
		if err != nil {
			return
		}
		if m.total == 0 || m.total > MaxMemBytes || m.available > m.total {
			t.Fatalf("parseMeminfo(%q) = %+v breaks its bounds", data, m)
		}
	})
}

func FuzzParseNvidiaSMI(f *testing.F) {
	f.Add([]byte(realNvidiaSMI))
	f.Add([]byte("0, Tesla, Model X, GPU-1, 100, 50, 90\n0, dup, GPU-2, 1, 1, 0\n"))
	f.Add([]byte("0, NVIDIA Jetson, [N/A], [N/A], [Not Supported], [N/A]\r\n"))
	f.Add([]byte("NVIDIA-SMI has failed\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := parseNvidiaSMI(data)
		if err != nil {
			return
		}
		if len(r.gpus) > MaxGPUs {
			t.Fatalf("%d gpus, bound %d", len(r.gpus), MaxGPUs)
		}
		// Whatever the decoder accepts must pass the checks a verifier
		// applies to facts from other nodes, capabilities included.
		f := Facts{NodeID: "n-0", OS: "linux", Arch: "amd64"}
		p := probed{gpuUtil: map[int]int{}}
		for _, g := range r.gpus {
			if g.util < -1 || g.util > 100 {
				t.Fatalf("utilisation %d", g.util)
			}
			f.GPUs = append(f.GPUs, g.GPU)
			if g.util >= 0 {
				p.gpuUtil[g.Index] = g.util
			}
		}
		f.Capabilities = capabilities(&f, &p)
		if err := f.Validate(); err != nil {
			t.Fatalf("decoded GPUs fail validation: %v\n%+v", err, r.gpus)
		}
	})
}

func TestParseSysctlBytes(t *testing.T) {
	tests := []struct {
		give    string
		want    uint64
		wantErr bool
	}{
		{give: "34359738368\n", want: 32 << 30},
		{give: " 1 ", want: 1},
		{give: "0\n", wantErr: true},
		{give: "-1\n", wantErr: true},
		{give: "lots\n", wantErr: true},
		{give: "18446744073709551615", wantErr: true},
		{give: "", wantErr: true},
		{give: strings.Repeat("1", MaxLineBytes+1), wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseSysctlBytes([]byte(tt.give))
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseSysctlBytes(%.20q) = %d, %v; want %d, error %v", tt.give, got, err, tt.want, tt.wantErr)
		}
	}
}

// FuzzParseSysctlBytes: sysctl's output is read like every other probe's.
// What parses is a memory size within bounds whose decimal form parses
// again to itself.
func FuzzParseSysctlBytes(f *testing.F) {
	f.Add([]byte("34359738368\n"))
	f.Add([]byte(" 1 "))
	f.Add([]byte("0\n"))
	f.Add([]byte("+5"))
	f.Add([]byte("18446744073709551615"))
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := parseSysctlBytes(data)
		if err != nil {
			if v != 0 {
				t.Fatalf("%d returned with an error", v)
			}
			return
		}
		if v == 0 || v > MaxMemBytes {
			t.Fatalf("parseSysctlBytes(%q) = %d, outside 1..%d", data, v, uint64(MaxMemBytes))
		}
		if again, err := parseSysctlBytes([]byte(strconv.FormatUint(v, 10))); err != nil || again != v {
			t.Fatalf("round trip of %d: %d, %v", v, again, err)
		}
	})
}

func TestParseVMStat(t *testing.T) {
	const header = "Mach Virtual Memory Statistics: (page size of 4096 bytes)\n"
	tests := []struct {
		name    string
		give    string
		want    uint64
		wantErr bool
	}{
		{name: "real", give: realVMStat, want: (3000 + 100000) * 16384},
		{name: "no inactive line", give: header + "Pages free: 10.\n", want: 10 * 4096},
		{name: "first occurrence wins", give: header + "Pages free: 10.\nPages free: 99.\nPages inactive: 1.\n", want: 11 * 4096},
		{name: "malformed values are ignored", give: header + "Pages free: x.\nPages free: -1.\nPages free: 2.\n", want: 2 * 4096},
		{name: "no page size", give: "Pages free: 10.\n", wantErr: true},
		{name: "absurd page size", give: "Mach Virtual Memory Statistics: (page size of 99999999999 bytes)\nPages free: 1.\n", wantErr: true},
		{name: "no free pages", give: header + "Pages inactive: 10.\n", wantErr: true},
		{name: "more memory than any machine", give: "Mach Virtual Memory Statistics: (page size of 1073741824 bytes)\nPages free: 4503599627370496.\n", wantErr: true},
		{name: "too large", give: header + strings.Repeat("x", MaxMeminfoBytes), wantErr: true},
		{name: "empty", give: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseVMStat([]byte(tt.give))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("parseVMStat = %d, %v; want %d, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestParseVersion(t *testing.T) {
	tests := []struct{ give, want string }{
		{"version: 4567 (3d1f2a9b)\nbuilt with cc (GCC) 13.2.0 for x86_64-linux-gnu\n", "4567"},
		{"ollama version is 0.5.7\n", "0.5.7"},
		{"Warning: could not connect to a running Ollama instance\nWarning: client version is 0.5.7\n", "0.5.7"},
		{"Version 1.2.3-rc.1+build5, built today", "1.2.3-rc.1+build5"},
		{"version: unknown\nversion: 2\n", "2"},
		{"no such thing\n", ""},
		{"version:\n", ""},
		{"version: (abc)\n", ""},
		{"", ""},
		{strings.Repeat("\n", 20) + "version: 9\n", ""},
		{"version: " + strings.Repeat("1", 100) + "\n", ""},
	}
	for _, tt := range tests {
		if got := parseVersion([]byte(tt.give)); got != tt.want {
			t.Errorf("parseVersion(%.40q) = %q, want %q", tt.give, got, tt.want)
		}
	}
}

func FuzzParseVMStat(f *testing.F) {
	f.Add([]byte(realVMStat))
	f.Add([]byte("Mach Virtual Memory Statistics: (page size of 1073741824 bytes)\nPages free: 4194303.\nPages inactive: 4194303.\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := parseVMStat(data)
		if err == nil && v > MaxMemBytes {
			t.Fatalf("parseVMStat = %d, above %d", v, uint64(MaxMemBytes))
		}
	})
}

func FuzzParseVersion(f *testing.F) {
	f.Add([]byte("version: 4567 (3d1f2a9b)\n"))
	f.Add([]byte("Warning: client version is 0.5.7\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		v := parseVersion(data)
		if v == "" {
			return
		}
		if !grammar.ValidVersion(v) {
			t.Fatalf("parseVersion = %q, not a version", v)
		}
		// Every version Probe finds must fit a capability attribute.
		if err := grammar.StringValue(v).Check(); err != nil {
			t.Fatal(err)
		}
	})
}
