package plane

// This file reads decisions back from the audit chain: each
// plane.decision record carries what its explanation needs (the engine's
// candidates with their scores and rejections, bounded), so a decision
// older than the Recent ring, or made before a restart, is still
// explained, from the chain file alone.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/engine"
)

// Bounds of what a decision record keeps of the engine's candidates, so
// that a decision over a large cluster stays well within
// chain.MaxEntryBytes: the first MaxChainedCandidates candidates in the
// engine's order (the eligible ones, best first, then the rejected), each
// rejection's detail cut to MaxChainedDetail bytes.
const (
	MaxChainedCandidates = 128
	MaxChainedDetail     = 240
)

// chainedCandidate is one engine candidate in a decision record.
// Eligible: variant, tier, score (execution, locality, accel_fit, perf,
// load, stickiness, total) and flags; rejected: its rejections.
type chainedCandidate struct {
	Node     string             `json:"node"`
	Variant  string             `json:"variant,omitempty"`
	Tier     string             `json:"tier,omitempty"`
	Score    []float64          `json:"score,omitempty"`
	Flags    []string           `json:"flags,omitempty"`
	Rejected []chainedRejection `json:"rejected,omitempty"`
}

type chainedRejection struct {
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

// chainedChoice is the chosen placement in a decision record.
type chainedChoice struct {
	Tier        string  `json:"tier"`
	Emulated    bool    `json:"emulated,omitempty"`
	Accelerator string  `json:"accelerator,omitempty"`
	Score       float64 `json:"score"`
}

// explainFields fills what rec needs to be explained from the chain.
func (rec *decisionRecord) explainFields(dec engine.Decision) {
	rec.Pin, rec.AllowEmulated = dec.Pin, dec.AllowEmulated
	if c := dec.Chosen; c != nil {
		rec.Choice = &chainedChoice{Tier: c.Tier.String(), Emulated: c.Execution == engine.Emulated, Accelerator: c.Accelerator, Score: c.Score.Total}
	}
	n := min(len(dec.Candidates), MaxChainedCandidates)
	rec.Ranked = make([]chainedCandidate, n)
	rec.RankedOmitted = len(dec.Candidates) - n
	for i, c := range dec.Candidates[:n] {
		cc := chainedCandidate{Node: c.Node}
		if c.Eligible() {
			s := c.Score
			cc.Variant, cc.Tier = c.Variant, c.Tier.String()
			cc.Score = []float64{round2(s.Execution), round2(s.Locality), round2(s.AccelFit), round2(s.Perf), round2(s.Load), round2(s.Stickiness), round2(s.Total)}
			if c.Flags != 0 {
				cc.Flags = c.Flags.Names()
			}
		}
		for _, r := range c.Rejections {
			d := r.Detail()
			if len(d) > MaxChainedDetail {
				d = d[:MaxChainedDetail] + "..."
			}
			cc.Rejected = append(cc.Rejected, chainedRejection{Code: string(r.Code), Detail: d})
		}
		rec.Ranked[i] = cc
	}
}

// round2 keeps the two decimals the explanation prints.
func round2(f float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(f, 'f', 2, 64), 64)
	return v
}

// ChainedDecision is a decision read back from the audit chain: its
// entry, and its explanation rebuilt from the record and the dispatch
// records that follow it.
type ChainedDecision struct {
	ID   string
	Seq  uint64
	Time string
	// Explain is in the format of Report.Explain.
	Explain string
}

// MaxChainedMatches is how many decisions ScanDecisions returns at most
// for one prefix (more means the prefix is too short to name one).
const MaxChainedMatches = 8

// ErrChainLine is wrapped by ScanDecisions for a chain line longer than
// chain.MaxEntryBytes (a line that does not decode is skipped).
var ErrChainLine = errors.New("chain line not readable")

// ScanDecisions reads a chain file from r, once, line by line (a line at
// most chain.MaxEntryBytes; memory is bounded by that and
// MaxChainedMatches), and returns the controller's decisions whose id
// (the entry hash) starts with prefix, in chain order, at most
// MaxChainedMatches, each explained from its record and the dispatch,
// placed and adopted records of it that follow. Only lines that name a
// decision are decoded; the others are skipped on a byte search. The
// entries are taken as the file holds them: `nodeld chain verify` checks
// the file's hashes and signatures. The cost is one read of the file.
func ScanDecisions(r io.Reader, prefix string) ([]ChainedDecision, error) {
	type found struct {
		e        chain.Entry
		rec      decisionRecord
		attempts []Attempt
		placed   []placedRecord
		unsettld bool
	}
	var (
		matches []*found
		line    int
	)
	decisionKind := []byte(`","kind":"` + KindDecision + `","payload":`)
	hashAt := []byte(`","hash":"` + prefix)
	follow := [][]byte{
		[]byte(`","kind":"` + KindDispatch + `","payload":`),
		[]byte(`","kind":"` + KindPlaced + `","payload":`),
		[]byte(`","kind":"` + KindAdopted + `","payload":`),
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), chain.MaxEntryBytes)
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if bytes.Contains(b, decisionKind) {
			if len(matches) >= MaxChainedMatches || !bytes.Contains(b, hashAt) {
				continue
			}
			// A line that does not decode (torn by a crash, or being
			// appended right now) is skipped like any other.
			var e chain.Entry
			if json.Unmarshal(b, &e) != nil || e.Source != ChainSource || e.Kind != KindDecision || !strings.HasPrefix(e.Hash, prefix) {
				continue
			}
			f := &found{e: e}
			if json.Unmarshal(e.Payload, &f.rec) != nil {
				continue
			}
			matches = append(matches, f)
			continue
		}
		if len(matches) == 0 {
			continue
		}
		kind := -1
		for i, k := range follow {
			if bytes.Contains(b, k) {
				kind = i
			}
		}
		if kind < 0 {
			continue
		}
		for _, f := range matches {
			if !bytes.Contains(b, []byte(f.e.Hash)) {
				continue
			}
			var e chain.Entry
			if json.Unmarshal(b, &e) != nil || e.Source != ChainSource {
				continue
			}
			switch kind {
			case 0:
				var d dispatchRecord
				if json.Unmarshal(e.Payload, &d) != nil || d.DecisionID != f.e.Hash {
					continue
				}
				if d.Outcome == "abandoned" {
					continue
				}
				f.attempts = append(f.attempts, Attempt{Node: d.Node, Variant: d.Variant, Outcome: d.Outcome,
					Code: ctl.Code(d.Code), Reason: d.Reason})
				f.unsettld = d.Next == nextStopped
			default:
				var p placedRecord
				if json.Unmarshal(e.Payload, &p) != nil || p.DecisionID != f.e.Hash {
					continue
				}
				outcome := outPlaced
				if kind == 2 {
					outcome = outAdopted
				}
				if kind == 1 {
					f.attempts = append(f.attempts, Attempt{Node: p.Node, Variant: p.Variant, Outcome: outcome})
				}
				f.placed = append(f.placed, p)
				f.unsettld = false
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w: %w", line+1, ErrChainLine, err)
	}
	out := make([]ChainedDecision, len(matches))
	for i, f := range matches {
		var b strings.Builder
		f.rec.explain(&b)
		writeDispatch(&b, f.e.Hash, f.attempts)
		for _, p := range f.placed {
			fmt.Fprintf(&b, "instance: %s on %s\n", p.InstanceID, p.Node)
		}
		if f.unsettld {
			b.WriteString("unsettled when last chained: the node may hold the instance; settled on a later tick\n")
		}
		fmt.Fprintf(&b, "(from the audit chain: entry %d at %s)\n", f.e.Seq, f.e.Time)
		out[i] = ChainedDecision{ID: f.e.Hash, Seq: f.e.Seq, Time: f.e.Time, Explain: b.String()}
	}
	return out, nil
}

// explain renders a decision record in the format of engine.Decision's
// Explain, as far as the record keeps it.
func (rec *decisionRecord) explain(b *strings.Builder) {
	pin := rec.Pin
	if pin == "" {
		pin = "-"
	}
	fmt.Fprintf(b, "workload %s (kind %s): package %s %s, reason %s", rec.Workload, rec.Kind, rec.Package, rec.Version, rec.Reason)
	if rec.DryRun {
		b.WriteString(", dry run")
	}
	b.WriteByte('\n')
	fmt.Fprintf(b, "  allow_emulated: %t   pin: %s\n", rec.AllowEmulated, pin)
	if rec.Replaces != "" {
		fmt.Fprintf(b, "  replaces: %s\n", rec.Replaces)
	}
	if rec.Supersedes != "" {
		fmt.Fprintf(b, "  supersedes: %s\n", rec.Supersedes)
	}
	if rec.Declared != "" && rec.Replica != nil {
		fmt.Fprintf(b, "  declared workload %s, replica %d\n", rec.Declared, *rec.Replica)
	}
	b.WriteString("  tier order (strict): native > emulated > dev_fallback (candidates rank by tier, then score)\n")
	switch {
	case rec.Chosen != "":
		fmt.Fprintf(b, "decision: PLACED on %s via %s", rec.Chosen, rec.Variant)
		if c := rec.Choice; c != nil {
			fmt.Fprintf(b, " (tier %s, emulated %t) score %s", c.Tier, c.Emulated, score2(c.Score))
			if c.Accelerator != "" {
				fmt.Fprintf(b, ", accelerator %s", c.Accelerator)
			}
		}
		b.WriteByte('\n')
	case rec.Pin != "":
		fmt.Fprintf(b, "decision: UNPLACEABLE (pinned node %s is not eligible)\n", rec.Pin)
	default:
		b.WriteString("decision: UNPLACEABLE (no eligible node)\n")
	}
	if rec.Error != "" {
		fmt.Fprintf(b, "  engine: %s\n", rec.Error)
	}
	if rec.Ranked == nil {
		// A record chained before candidates were: their ids only.
		fmt.Fprintf(b, "candidates (ids only): %s\n", strings.Join(rec.Candidates, ", "))
		if len(rec.Rejected) > 0 {
			fmt.Fprintf(b, "rejected (ids only): %s\n", strings.Join(rec.Rejected, ", "))
		}
		return
	}
	b.WriteString("candidates:\n")
	rank := 0
	for _, c := range rec.Ranked {
		if len(c.Score) == 0 {
			fmt.Fprintf(b, "  -  %s rejected\n", c.Node)
			for _, r := range c.Rejected {
				fmt.Fprintf(b, "       %s: %s\n", r.Code, r.Detail)
			}
			continue
		}
		rank++
		fmt.Fprintf(b, "  %d. %s eligible via %s (tier %s) score %s", rank, c.Node, c.Variant, c.Tier, score2(c.Score[len(c.Score)-1]))
		if len(c.Flags) > 0 {
			fmt.Fprintf(b, " [%s]", strings.Join(c.Flags, ", "))
		}
		b.WriteByte('\n')
		if len(c.Score) == 7 {
			s := c.Score
			fmt.Fprintf(b, "       execution %s + locality %s + accel_fit %s + perf %s + load %s + stickiness %s\n",
				score2(s[0]), score2(s[1]), score2(s[2]), score2(s[3]), score2(s[4]), score2(s[5]))
		}
	}
	if rec.RankedOmitted > 0 {
		fmt.Fprintf(b, "  ... and %d more candidates, not chained\n", rec.RankedOmitted)
	}
	for _, n := range rec.Notes {
		b.WriteString(n + "\n")
	}
	b.WriteString(tieBreakNote + "\n")
}

func score2(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) }
