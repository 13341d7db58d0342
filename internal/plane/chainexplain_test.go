package plane

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/plane/planetest"
)

func scanChain(t *testing.T, r *rig, prefix string) []ChainedDecision {
	t.Helper()
	f, err := os.Open(r.chain.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ds, err := ScanDecisions(f, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// TestExplainFromChainBeyondRecent: a decision pushed out of the Recent
// ring by more than MaxRecentReports later ones is explained from the
// chain alone: by its id or an 8-character prefix, with every candidate
// line of the engine's explanation (ranks, scores, every rejection with
// its reason), its dispatch attempts and the instance placed.
func TestExplainFromChainBeyondRecent(t *testing.T) {
	r, hs := newRig(t, 8, 16, 4)
	r.cl.Set(hs[2], func(h *planetest.Host) { h.HostOff = true })
	r.cl.Set(hs[1], func(h *planetest.Host) { h.Place = planetest.PlaceRefuse })
	r.tick()
	rep := r.place(echo)
	if rep.Placed == nil || len(rep.Attempts) != 2 {
		t.Fatalf("placed %+v after %v", rep.Placed, outcomes(rep.Attempts))
	}
	dry := echo
	dry.DryRun = true
	for range MaxRecentReports + 4 {
		r.place(dry)
	}
	if _, ok := r.c.Recent(rep.DecisionID); ok {
		t.Fatal("the first decision is still in the Recent ring")
	}
	for _, ref := range []string{rep.DecisionID, rep.DecisionID[:8]} {
		ds := scanChain(t, r, ref)
		if len(ds) != 1 || ds[0].ID != rep.DecisionID {
			t.Fatalf("scan %s: %d decisions", ref, len(ds))
		}
		got := ds[0].Explain
		want := rep.Explain()
		// Every line of the report from the candidates on is in the
		// rebuilt explanation as it was: ranks, scores and their
		// breakdown, rejections with their details, dispatch outcomes.
		_, tail, _ := strings.Cut(want, "candidates:\n")
		for _, line := range strings.Split(strings.TrimSpace(tail), "\n") {
			if !strings.Contains(got, line+"\n") {
				t.Errorf("rebuilt explanation lacks %q:\n%s\nwant:\n%s", line, got, want)
			}
		}
		for _, frag := range []string{
			"decision: PLACED on " + rep.Decision.Chosen.Node + " via cpu (tier native, emulated false) score ",
			"its workload host is disabled",
			"instance: " + rep.Placed.InstanceID + " on " + rep.Placed.Node,
			"(from the audit chain: entry ",
		} {
			if !strings.Contains(got, frag) {
				t.Errorf("rebuilt explanation lacks %q:\n%s", frag, got)
			}
		}
	}
	// A prefix of one character names many decisions; at most
	// MaxChainedMatches are returned.
	if ds := scanChain(t, r, rep.DecisionID[:1]); len(ds) < 2 || len(ds) > MaxChainedMatches {
		t.Errorf("a one-character prefix: %d decisions", len(ds))
	}
	if ds := scanChain(t, r, strings.Repeat("0", 64)); len(ds) != 0 {
		t.Errorf("an unknown id: %d decisions", len(ds))
	}
}

// A line longer than a chain line may be is an error, not a hang or a
// huge allocation; a line that is not an entry is skipped.
func TestScanDecisionsBounded(t *testing.T) {
	long := strings.Repeat("x", 1<<20+1)
	if _, err := ScanDecisions(strings.NewReader(long+"\n"), "ab"); err == nil {
		t.Error("a line over chain.MaxEntryBytes: no error")
	}
	junk := `{"seq":1,"time":"t","source":"plane","kind":"plane.decision","payload":{` + "\n" + "not json\n"
	if ds, err := ScanDecisions(strings.NewReader(junk), ""); err != nil || len(ds) != 0 {
		t.Errorf("torn lines: %d decisions, %v", len(ds), err)
	}
}

func FuzzScanDecisions(f *testing.F) {
	f.Add([]byte(`{"seq":2,"time":"t","source":"plane","kind":"plane.decision","payload":{"workload":"w","ranked":[{"node":"n","score":[1,2]}]},"prev":"p","hash":"abcd","sig":"s"}`+"\n"), "ab")
	f.Add([]byte(`{"seq":3,"time":"t","source":"plane","kind":"plane.dispatch","payload":{"decision_id":"abcd","next":"x"},"prev":"p","hash":"ef","sig":"s"}`), "")
	f.Fuzz(func(t *testing.T, data []byte, prefix string) {
		ds, err := ScanDecisions(strings.NewReader(string(data)), prefix)
		if err == nil && len(ds) > MaxChainedMatches {
			t.Fatalf("%d matches", len(ds))
		}
		for _, d := range ds {
			if !strings.HasPrefix(d.ID, prefix) || d.Explain == "" {
				t.Fatalf("match %q for prefix %q", d.ID, prefix)
			}
		}
	})
}

// BenchmarkScanDecisions: one scan of a 100,000-line chain (about 60 MB:
// lines of other components, the controller's lifecycle and dispatch
// records, and a decision every 100 lines, each with 100 ranked
// candidates) for one decision id. SetBytes: the rate is MB of chain.
func BenchmarkScanDecisions(b *testing.B) {
	var sb strings.Builder
	ranked := make([]string, 100)
	for i := range ranked {
		ranked[i] = `{"node":"n-00000000000000` + strings.Repeat("a", 2) + `","variant":"cpu","tier":"native","score":[100,0,10,0,10,0,120]}`
	}
	decision := `,"source":"plane","kind":"plane.decision","payload":{"workload":"echo","kind":"service","package":"echo","version":"1.0.0","reason":"operator","candidates":[],"ranked":[` + strings.Join(ranked, ",") + `]},"prev":"` + strings.Repeat("0", 64) + `","hash":"`
	other := `,"source":"proxy","kind":"proxy.request","payload":{"role":"chat","status":200,"bytes":12345,"detail":"` + strings.Repeat("x", 400) + `"},"prev":"` + strings.Repeat("0", 64) + `","hash":"`
	var want string
	for i := range 100000 {
		sum := sha256.Sum256(fmt.Appendf(nil, "entry %d", i))
		h := hex.EncodeToString(sum[:])
		line := other
		if i%100 == 7 {
			line = decision
			if i == 50007 {
				want = h
			}
		}
		fmt.Fprintf(&sb, `{"seq":%d,"time":"2026-12-01T08:00:00.000000000Z"%s%s","sig":"%s"}`+"\n", i+1, line, h, strings.Repeat("f", 128))
	}
	data := sb.String()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		ds, err := ScanDecisions(strings.NewReader(data), want[:8])
		if err != nil || len(ds) != 1 {
			b.Fatalf("%d decisions, %v", len(ds), err)
		}
	}
}
