package facts

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
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

const realNvidiaSMI = `0, NVIDIA GeForce RTX 4090, GPU-5f1b6d3c-2a6e-4f0e-9d8e-6a1c2b3d4e5f, 24564, 23987
1, NVIDIA A100-SXM4-80GB, GPU-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d, 81920, 1024
`

func TestParseNvidiaSMI(t *testing.T) {
	const mib = 1 << 20
	rtx := GPU{Index: 0, Name: "NVIDIA GeForce RTX 4090", UUID: "GPU-5f1b6d3c-2a6e-4f0e-9d8e-6a1c2b3d4e5f",
		VRAMTotalBytes: 24564 * mib, VRAMFreeBytes: 23987 * mib}
	a100 := GPU{Index: 1, Name: "NVIDIA A100-SXM4-80GB", UUID: "GPU-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d",
		VRAMTotalBytes: 81920 * mib, VRAMFreeBytes: 1024 * mib}

	var many strings.Builder
	for i := range MaxGPUs + 3 {
		fmt.Fprintf(&many, "%d, GPU %d, GPU-%d, 1024, 512\n", i, i, i)
	}

	tests := []struct {
		name    string
		give    string
		want    nvidiaResult
		wantErr bool
	}{
		{name: "real", give: realNvidiaSMI, want: nvidiaResult{gpus: []GPU{rtx, a100}}},
		{name: "empty", give: "", want: nvidiaResult{}},
		{
			name: "sorted by index, crlf and blank lines",
			give: "\r\n1, NVIDIA A100-SXM4-80GB, GPU-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d, 81920, 1024\r\n\n" +
				"0, NVIDIA GeForce RTX 4090, GPU-5f1b6d3c-2a6e-4f0e-9d8e-6a1c2b3d4e5f, 24564, 23987\r\n",
			want: nvidiaResult{gpus: []GPU{rtx, a100}},
		},
		{
			name: "name with a comma",
			give: "0, Tesla, Model X, GPU-1, 100, 50\n",
			want: nvidiaResult{gpus: []GPU{{Index: 0, Name: "Tesla, Model X", UUID: "GPU-1", VRAMTotalBytes: 100 * mib, VRAMFreeBytes: 50 * mib}}},
		},
		{
			name: "not available fields",
			give: "0, NVIDIA Jetson, [N/A], [N/A], [Not Supported]\n",
			want: nvidiaResult{gpus: []GPU{{Index: 0, Name: "NVIDIA Jetson"}}},
		},
		{
			name: "free above total is clamped",
			give: "0, X, GPU-1, 100, 500\n",
			want: nvidiaResult{gpus: []GPU{{Index: 0, Name: "X", UUID: "GPU-1", VRAMTotalBytes: 100 * mib, VRAMFreeBytes: 100 * mib}}},
		},
		{
			name: "malformed lines are skipped and counted",
			give: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n" +
				"x, X, GPU-1, 100, 50\n" + // bad index
				"-1, X, GPU-1, 100, 50\n" + // negative index
				"99999, X, GPU-1, 100, 50\n" + // index too large
				"0, X, GPU-1, lots, 50\n" + // bad total
				"0, X, GPU-1, 100, -5\n" + // bad free
				"0, X, GPU-1, 99999999999, 50\n" + // absurd total
				"0, X, GPU-\x01, 100, 50\n" + // control byte in uuid
				"0, X, " + strings.Repeat("u", MaxGPUUUIDBytes+1) + ", 100, 50\n" + // long uuid
				"0, " + strings.Repeat("n", MaxLineBytes) + ", GPU-1, 100, 50\n" + // overlong line
				"0, X, 100, 50\n" + // too few fields
				"0, X, GPU-1, 100, 50\n" +
				"0, Y, GPU-2, 100, 50\n", // repeated index
			want: nvidiaResult{
				gpus:    []GPU{{Index: 0, Name: "X", UUID: "GPU-1", VRAMTotalBytes: 100 * mib, VRAMFreeBytes: 50 * mib}},
				skipped: 12,
			},
		},
		{
			name: "long name is truncated",
			give: "0, " + strings.Repeat("é", MaxGPUNameBytes) + ", GPU-1, 1, 1\n",
			want: nvidiaResult{gpus: []GPU{{Index: 0, Name: strings.Repeat("é", MaxGPUNameBytes/2), UUID: "GPU-1", VRAMTotalBytes: mib, VRAMFreeBytes: mib}}},
		},
		{
			name: "too many GPUs",
			give: many.String(),
			want: func() nvidiaResult {
				r := nvidiaResult{dropped: 3}
				for i := range MaxGPUs {
					r.gpus = append(r.gpus, GPU{Index: i, Name: fmt.Sprintf("GPU %d", i), UUID: fmt.Sprintf("GPU-%d", i),
						VRAMTotalBytes: 1024 * mib, VRAMFreeBytes: 512 * mib})
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
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(nvidiaResult{})); diff != "" {
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
	f.Add([]byte("0, Tesla, Model X, GPU-1, 100, 50\n0, dup, GPU-2, 1, 1\n"))
	f.Add([]byte("0, NVIDIA Jetson, [N/A], [N/A], [Not Supported]\r\n"))
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
		// applies to facts from other nodes.
		f := Facts{NodeID: "n-0", OS: "linux", Arch: "amd64", GPUs: r.gpus}
		if err := f.Validate(); err != nil {
			t.Fatalf("decoded GPUs fail validation: %v\n%+v", err, r.gpus)
		}
	})
}
