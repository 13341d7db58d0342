package facts

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/grammar"
)

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const rx7900xtTotal, rx7900xtUsed = 21458059264, 27856896

func TestParseRocmSMI(t *testing.T) {
	real := gpuReading{GPU: GPU{Index: 0, Name: "Radeon RX 7900 XT", VRAMTotalBytes: rx7900xtTotal,
		VRAMFreeBytes: rx7900xtTotal - rx7900xtUsed}, util: 0}
	card := func(idx int, fields string) string { return fmt.Sprintf(`"card%d": {%s}`, idx, fields) }
	tests := []struct {
		name string
		give string
		want rocmResult
	}{
		{name: "real", give: string(readTestdata(t, "rocm-smi-rx7900xt.json")), want: rocmResult{gpus: []gpuReading{real}}},
		{
			name: "cards by index, other keys ignored, older key spelling",
			give: `{"system": {"Driver version": "6.7.0"}, ` +
				card(1, `"GPU use (%)": "95", "VRAM Total Memory (B)": "68702699520", "VRAM Total Used Memory (B)": "68000000000", "Card series": "Arcturus GL-XL [AMD Instinct MI100]", "Card model": "0x0c34"`) + `, ` +
				card(0, `"GPU use (%)": "N/A", "VRAM Total Memory (B)": "N/A", "Device Name": "Phoenix3", "Unique ID": "0x1f9de0957d137942"`) + `}`,
			want: rocmResult{gpus: []gpuReading{
				{GPU: GPU{Index: 0, Name: "Phoenix3", UUID: "0x1f9de0957d137942"}, util: -1},
				{GPU: GPU{Index: 1, Name: "Arcturus GL-XL [AMD Instinct MI100]", VRAMTotalBytes: 68702699520, VRAMFreeBytes: 702699520}, util: 95},
			}},
		},
		{
			name: "a PCI id is no name; used beyond total leaves nothing free",
			give: `{` + card(2, `"Card Model": "0x744c", "VRAM Total Memory (B)": "1024", "VRAM Total Used Memory (B)": "4096"`) + `}`,
			want: rocmResult{gpus: []gpuReading{{GPU: GPU{Index: 2, VRAMTotalBytes: 1024}, util: -1}}},
		},
		{
			name: "malformed cards skipped",
			give: `{` + card(0, `"GPU use (%)": "150"`) + `, ` + card(1, `"VRAM Total Memory (B)": "-1"`) + `, ` +
				card(2, `"VRAM Total Memory (B)": "99999999999999999999"`) + `, "card3": "not an object", "card04": {}, "cardx": {}, ` +
				card(5, `"GPU use (%)": "7"`) + `}`,
			want: rocmResult{gpus: []gpuReading{{GPU: GPU{Index: 5}, util: 7}}, skipped: 6},
		},
		{name: "no cards", give: `{}`, want: rocmResult{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseRocmSMI([]byte(tt.give))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(rocmResult{}, gpuReading{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}

	var many []string
	for i := range MaxGPUs + 3 {
		many = append(many, card(i, `"GPU use (%)": "1"`))
	}
	got, err := parseRocmSMI([]byte("{" + strings.Join(many, ",") + "}"))
	if err != nil || len(got.gpus) != MaxGPUs || got.dropped != 3 || got.gpus[MaxGPUs-1].Index != MaxGPUs-1 {
		t.Errorf("past MaxGPUs: %d kept, %d dropped, %v", len(got.gpus), got.dropped, err)
	}
	for _, bad := range []string{"", "[]", "WARNING: no AMD GPUs", `{"card0": {}`, strings.Repeat(" ", MaxCommandOutputBytes+1)} {
		if _, err := parseRocmSMI([]byte(bad)); err == nil {
			t.Errorf("%.40q: no error", bad)
		}
	}
}

func FuzzParseRocmSMI(f *testing.F) {
	f.Add(readTestdata(f, "rocm-smi-rx7900xt.json"))
	f.Add([]byte(`{"card1": {"GPU use (%)": "95", "VRAM Total Memory (B)": "68702699520", "Card series": "x"}, "card0": {"Device Name": "N/A"}}`))
	f.Add([]byte(`{"card0": {"GPU use (%)": 3}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := parseRocmSMI(data)
		if err != nil {
			return
		}
		if len(r.gpus) > MaxGPUs {
			t.Fatalf("%d GPUs", len(r.gpus))
		}
		for i, g := range r.gpus {
			if g.VRAMFreeBytes > g.VRAMTotalBytes || g.VRAMTotalBytes > MaxVRAMMiB<<20 || g.util < -1 || g.util > 100 ||
				len(g.Name) > MaxGPUNameBytes || g.Index < 0 || g.Index >= MaxGPUIndex || (i > 0 && g.Index <= r.gpus[i-1].Index) {
				t.Fatalf("bad GPU %+v", g)
			}
		}
	})
}

func TestParseSPDisplays(t *testing.T) {
	tests := []struct {
		name string
		give string
		want displaysResult
	}{
		{name: "apple silicon", give: string(readTestdata(t, "system_profiler-m3-pro.json")),
			want: displaysResult{gpus: []displayGPU{{vendor: "apple", name: "Apple M3 Pro", cores: 18}}}},
		{name: "intel mac with a radeon", give: string(readTestdata(t, "system_profiler-intel-radeon.json")),
			want: displaysResult{gpus: []displayGPU{
				{vendor: "intel", name: "Intel UHD Graphics 630", vram: 1536 << 20},
				{vendor: "amd", name: "AMD Radeon Pro 5300M", vram: 4 << 30},
			}}},
		{
			name: "older names, vendors from names, entries that are not GPUs",
			give: `{"SPDisplaysDataType": [
				{"_name": "kHW_AppleM1Item", "sppci_model": "Apple M1", "sppci_cores": "8"},
				{"_name": "NVIDIA GeForce GT 750M", "spdisplays_vendor": "NVIDIA (0x10de)", "spdisplays_vram": "2048 MB"},
				{"_name": "AMD FirePro D500", "spdisplays_vendor": "ATI (0x1002)", "spdisplays_vram": "3 GB"},
				{"_name": "Display", "sppci_device_type": "spdisplays_display"},
				{"_name": "Some GPU"}
			]}`,
			want: displaysResult{gpus: []displayGPU{
				{vendor: "apple", name: "Apple M1", cores: 8},
				{vendor: "nvidia", name: "NVIDIA GeForce GT 750M", vram: 2 << 30},
				{vendor: "amd", name: "AMD FirePro D500", vram: 3 << 30},
				{name: "Some GPU"},
			}},
		},
		{
			name: "malformed entries skipped",
			give: `{"SPDisplaysDataType": [{"_name": "kHW_IntelIris6100Item"}, {"_name": "A", "spdisplays_vram": "lots"},
				{"_name": "B", "spdisplays_vram": "99999999 GB"}, {"_name": "C", "sppci_cores": "-3"}, 7, {}]}`,
			want: displaysResult{skipped: 6},
		},
		{name: "no GPUs", give: `{"SPDisplaysDataType": []}`},
		{name: "another data type", give: `{"SPMemoryDataType": [{"SPMemoryDataType": "8 GB"}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseSPDisplays([]byte(tt.give))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(displaysResult{}, displayGPU{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	for _, bad := range []string{"", "null x", `{"SPDisplaysDataType": {}}`, strings.Repeat(" ", MaxCommandOutputBytes+1)} {
		if _, err := parseSPDisplays([]byte(bad)); err == nil {
			t.Errorf("%.40q: no error", bad)
		}
	}
}

func FuzzParseSPDisplays(f *testing.F) {
	f.Add(readTestdata(f, "system_profiler-m3-pro.json"))
	f.Add(readTestdata(f, "system_profiler-intel-radeon.json"))
	f.Add([]byte(`{"SPDisplaysDataType": [{"_name": "x", "spdisplays_vram": "1 GB", "sppci_cores": "2"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := parseSPDisplays(data)
		if err != nil {
			return
		}
		if len(r.gpus) > MaxGPUs {
			t.Fatalf("%d GPUs", len(r.gpus))
		}
		for _, g := range r.gpus {
			if g.name == "" || len(g.name) > MaxGPUNameBytes || g.vram > MaxVRAMMiB<<20 || g.cores < 0 {
				t.Fatalf("bad GPU %+v", g)
			}
		}
	})
}

// TestProbeAMDGPUs: rocm-smi's GPUs become accel.gpu.amd records with
// their memory (mem.vram), busy above GPUBusyPercent; a failing rocm-smi
// is a note, an absent one is nothing at all.
func TestProbeAMDGPUs(t *testing.T) {
	key := "/usr/bin/rocm-smi " + strings.Join(RocmSMIArgs(), " ")
	busy := `{"card0": {"GPU use (%)": "97", "VRAM Total Memory (B)": "1073741824", "VRAM Total Used Memory (B)": "0", "Card Series": "Instinct MI300X"}}`
	tests := []struct {
		name   string
		output string // "" : rocm-smi fails
		onPath bool
		want   []Capability
		notes  []Note
	}{
		{name: "real", onPath: true, output: string(readTestdata(t, "rocm-smi-rx7900xt.json")), want: []Capability{
			probedRec("accel.gpu.amd.radeon-rx-7900-xt", attrs("index", 0, "mem_bytes", rx7900xtTotal, "name", "Radeon RX 7900 XT", "utilization_pct", 0)),
			probedRec("mem.vram", attrs("index", 0, "total", rx7900xtTotal, "free", rx7900xtTotal-rx7900xtUsed)),
		}},
		{name: "busy", onPath: true, output: busy, want: []Capability{
			rec("accel.gpu.amd.instinct-mi300x", grammar.ProvenanceProbed, grammar.StateBusy, attrs("index", 0, "mem_bytes", 1<<30, "name", "Instinct MI300X", "utilization_pct", 97)),
			probedRec("mem.vram", attrs("index", 0, "total", 1<<30, "free", 1<<30)),
		}},
		{name: "fails", onPath: true, notes: []Note{{Probe: ProbeRocmSMI, Message: "exit status 1"}}},
		{name: "absent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := linuxMachine()
			m.onPath["rocm-smi"] = tt.onPath
			if tt.output != "" {
				m.outputs = map[string]string{key: tt.output}
			}
			f, err := Probe(context.Background(), m.deps(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var got []Capability
			for _, c := range f.Capabilities {
				if strings.HasPrefix(c.ID, "accel.") || c.ID == grammar.CapMemVRAM {
					got = append(got, c)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("records (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.notes, f.Notes); diff != "" {
				t.Errorf("notes (-want +got):\n%s", diff)
			}
			if len(f.GPUs) != 0 {
				t.Errorf("AMD GPUs in Facts.GPUs: %v", f.GPUs)
			}
			f.NodeID = "n-0"
			if err := f.Validate(); err != nil {
				t.Errorf("probed facts do not validate: %v", err)
			}
		})
	}
}

// TestProbeMacGPUs: system_profiler's GPUs become accel.gpu records (the
// Apple GPU's with its cores and the unified memory, in place of the one
// sysctl's chip name gives); its answer is kept by a Source's cache; a
// failing one is a note and the chip name still gives the Apple GPU; an
// absent one is nothing.
func TestProbeMacGPUs(t *testing.T) {
	key := SystemProfilerPath + " " + strings.Join(SystemProfilerArgs(), " ")
	t.Run("apple silicon", func(t *testing.T) {
		m, d := macMachine(t, "arm64")
		m.onPath[SystemProfilerPath] = true
		m.outputs[key] = string(readTestdata(t, "system_profiler-m3-pro.json"))
		at := time.Unix(1000, 0)
		cache := &versionCache{now: func() time.Time { return at }}
		for range 2 {
			f, err := probe(context.Background(), d, nil, cache)
			if err != nil {
				t.Fatal(err)
			}
			want := []Capability{probedRec("accel.gpu.apple.m3-pro", attrs("index", 0, "name", "Apple M3 Pro", "mem_bytes", 32<<30, "cores", 18))}
			if diff := cmp.Diff(want, accelRecords(f)); diff != "" {
				t.Errorf("records (-want +got):\n%s", diff)
			}
			if len(f.Notes) > 0 {
				t.Errorf("notes %v", f.Notes)
			}
		}
		if m.runs[key] != 1 {
			t.Errorf("system_profiler ran %d times, want 1", m.runs[key])
		}
	})
	t.Run("intel mac", func(t *testing.T) {
		m, d := macMachine(t, "amd64")
		m.onPath[SystemProfilerPath] = true
		m.outputs[key] = string(readTestdata(t, "system_profiler-intel-radeon.json"))
		f, err := Probe(context.Background(), d, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := []Capability{
			probedRec("accel.gpu.intel.uhd-graphics-630", attrs("index", 0, "name", "Intel UHD Graphics 630", "mem_bytes", 1536<<20)),
			probedRec("accel.gpu.amd.radeon-pro-5300m", attrs("index", 1, "name", "AMD Radeon Pro 5300M", "mem_bytes", 4<<30)),
		}
		if diff := cmp.Diff(want, accelRecords(f)); diff != "" {
			t.Errorf("records (-want +got):\n%s", diff)
		}
		f.NodeID = "n-0"
		if err := f.Validate(); err != nil {
			t.Errorf("probed facts do not validate: %v", err)
		}
	})
	t.Run("fails", func(t *testing.T) {
		m, d := macMachine(t, "arm64")
		m.onPath[SystemProfilerPath] = true
		f, err := Probe(context.Background(), d, nil)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]Note{{Probe: ProbeSystemProfiler, Message: "exit status 1"}}, f.Notes); diff != "" {
			t.Errorf("notes (-want +got):\n%s", diff)
		}
		if got := accelRecords(f); len(got) != 1 || got[0].ID != "accel.gpu.apple.m2-max" {
			t.Errorf("records %v, want the chip's", got)
		}
	})
	t.Run("absent", func(t *testing.T) {
		m, d := macMachine(t, "arm64")
		f, err := Probe(context.Background(), d, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Notes) > 0 || m.runs[key] != 0 {
			t.Errorf("notes %v, runs %d", f.Notes, m.runs[key])
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		m, d := macMachine(t, "arm64")
		m.onPath[SystemProfilerPath] = true
		ctx, cancel := context.WithCancel(context.Background())
		run := d.Run
		d.Run = func(c context.Context, path string, args []string, stderr bool) ([]byte, error) {
			if path == SystemProfilerPath {
				cancel()
				return nil, c.Err()
			}
			return run(c, path, args, stderr)
		}
		if _, err := Probe(ctx, d, nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("error %v, want context.Canceled", err)
		}
	})
}

func accelRecords(f Facts) []Capability {
	var out []Capability
	for _, c := range f.Capabilities {
		if strings.HasPrefix(c.ID, "accel.") {
			out = append(out, c)
		}
	}
	return out
}
