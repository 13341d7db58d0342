package engine

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nodeld/nodeld/internal/grammar"
)

func TestValidateRequest(t *testing.T) {
	tests := []struct {
		name string
		give func(*Request)
		want string // "" = valid
	}{
		{"valid", func(*Request) {}, ""},
		{"bad kind", func(r *Request) { r.Kind = "Bad Kind" }, `kind "Bad Kind": want 1 to 64 bytes`},
		{"empty name", func(r *Request) { r.Name = "" }, `name "": want 1 to 256 bytes of printable ASCII`},
		{"unprintable name", func(r *Request) { r.Name = "a\nb" }, `name "a\nb"`},
		{"no variants", func(r *Request) { r.Variants = nil }, "variants: none"},
		{"too many variants", func(r *Request) {
			for i := range MaxVariants {
				r.Variants = append(r.Variants, Variant{Name: "v" + strings.Repeat("x", i+1)})
			}
		}, "variants: 17, at most 16"},
		{"duplicate variant", func(r *Request) { r.Variants = append(r.Variants, r.Variants[0]) }, `variants[1].name "cuda": given twice`},
		{"bad variant name", func(r *Request) { r.Variants[0].Name = "CUDA" }, `variants[0].name "CUDA"`},
		{"bad execution", func(r *Request) { r.Variants[0].Execution = 7 }, "variants[0].execution: 7"},
		{"bad selector", func(r *Request) { r.Requirements[0].Selector = "OS" }, `requirements[0].selector "OS": not a capability id`},
		{"trust selector", func(r *Request) { r.Requirements[0].Selector = "trust.tier" }, "trust is assigned by operators"},
		{"count too big", func(r *Request) { r.Requirements[0].Count = 65 }, "requirements[0].count: 65, want 1 to 64"},
		{"negative count", func(r *Request) { r.Requirements[0].Count = -1 }, "requirements[0].count: -1"},
		{"too many requirements", func(r *Request) {
			r.Requirements = make([]Requirement, MaxRequirements+1)
			for i := range r.Requirements {
				r.Requirements[i].Selector = "os.linux"
			}
		}, "requirements: 65, at most 64"},
		{"bad provenance", func(r *Request) { r.Requirements[0].MinProvenance = "rumoured" }, `min_provenance "rumoured"`},
		{"bad floor", func(r *Request) { r.MinProvenance = "sworn" }, `min_provenance "sworn"`},
		{"too many predicates", func(r *Request) {
			r.Requirements[0].Predicates = make([]Predicate, MaxPredicates+1)
			for i := range r.Requirements[0].Predicates {
				r.Requirements[0].Predicates[i] = Predicate{"a", "eq", grammar.IntValue(1)}
			}
		}, "predicates: 33, at most 32"},
		{"bad attr", func(r *Request) { r.Requirements[0].Predicates = []Predicate{{"Mem", "eq", grammar.IntValue(1)}} }, `attr "Mem"`},
		{"bad op", func(r *Request) { r.Requirements[0].Predicates = []Predicate{{"a", "ne", grammar.IntValue(1)}} }, `op "ne"`},
		{"gte string", func(r *Request) { r.Requirements[0].Predicates = []Predicate{{"a", "gte", grammar.StringValue("1")}} }, "gte: operand must be a number"},
		{"eq list", func(r *Request) {
			r.Requirements[0].Predicates = []Predicate{{"a", "eq", grammar.ListValue(grammar.IntValue(1))}}
		}, "eq: operand must be a bool"},
		{"in scalar", func(r *Request) { r.Requirements[0].Predicates = []Predicate{{"a", "in", grammar.IntValue(1)}} }, "in: operand must be a list"},
		{"in empty", func(r *Request) { r.Requirements[0].Predicates = []Predicate{{"a", "in", grammar.ListValue()}} }, "in: operand must be a list"},
		{"in nested", func(r *Request) {
			r.Requirements[0].Predicates = []Predicate{{"a", "in", grammar.ListValue(grammar.ListValue(grammar.IntValue(1)))}}
		}, "list elements"},
		{"has list", func(r *Request) {
			r.Requirements[0].Predicates = []Predicate{{"a", "has", grammar.ListValue(grammar.IntValue(1))}}
		}, "has: operand must be"},
		{"nan operand", func(r *Request) {
			r.Requirements[0].Predicates = []Predicate{{"a", "lte", grammar.FloatValue(math.NaN())}}
		}, "lte: operand is not finite"},
		{"invalid operand", func(r *Request) { r.Requirements[0].Predicates = []Predicate{{"a", "eq", grammar.Value{}}} }, "eq: operand must be"},
		{"bad label", func(r *Request) { r.Labels = []string{""} }, `labels[0] ""`},
		{"too many excludes", func(r *Request) { r.Excludes = make([]string, 65) }, "excludes: 65 entries, at most 64"},
		{"long ref", func(r *Request) { r.RevocableRefs = []string{strings.Repeat("a", 257)} }, "revocable_refs[0]"},
		{"no trust floor", func(r *Request) { r.MinTrust = TrustNone }, "min_trust: none"},
		{"bad trust floor", func(r *Request) { r.MinTrust = 9 }, "min_trust: invalid"},
		{"preference weight", func(r *Request) {
			r.Preferences = []Preference{{Requirement{Selector: "label.rack"}, math.Inf(1)}}
		}, "preferences[0].weight: +Inf"},
		{"negative preference", func(r *Request) {
			r.Preferences = []Preference{{Requirement{Selector: "label.rack"}, -1}}
		}, "preferences[0].weight: -1"},
		{"preference selector", func(r *Request) {
			r.Preferences = []Preference{{Requirement{Selector: ""}, 1}}
		}, `preferences[0].requirement.selector ""`},
		{"perf id", func(r *Request) { r.Perf = &PerfTarget{ID: "perf", Better: BetterLower} }, `perf.id "perf"`},
		{"perf better", func(r *Request) { r.Perf = &PerfTarget{ID: "perf.infer.chat"} }, "perf.better"},
		{"perf budget", func(r *Request) {
			r.Perf = &PerfTarget{ID: "perf.infer.chat", Better: BetterLower, Budget: math.NaN(), HasBudget: true}
		}, "perf.budget: NaN"},
		{"perf param", func(r *Request) {
			r.Perf = &PerfTarget{ID: "perf.infer.chat", Better: BetterLower, Param: "model", ParamValue: grammar.ListValue()}
		}, "perf.param_value"},
		{"pin", func(r *Request) { r.Pin = "n\x00" }, `pin "n\x00"`},
		{"current node", func(r *Request) { r.CurrentNode = strings.Repeat("n", 300) }, "current_node"},
		{"prefer", func(r *Request) { r.Prefer = []string{""} }, `prefer[0] ""`},
		{"avoid", func(r *Request) { r.Avoid = make([]string, 65) }, "avoid: 65 entries"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := chatRequest()
			tt.give(&req)
			err := req.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want it to contain %q", err, tt.want)
			}
			_, err = Place(req, []Node{chatNode("n-a")}, Cluster{}, DefaultWeights())
			if !errors.Is(err, ErrInvalidRequest) {
				t.Errorf("Place error %v, want ErrInvalidRequest", err)
			}
		})
	}
}

// TestValidateReportsEveryProblem: one call names every problem.
func TestValidateReportsEveryProblem(t *testing.T) {
	req := chatRequest()
	req.Kind = ""
	req.Name = ""
	req.Variants[0].Requirements[0].Count = 99
	req.MinTrust = TrustNone
	err := req.Validate()
	if err == nil {
		t.Fatal("Validate = nil")
	}
	if got := strings.Count(err.Error(), "\n") + 1; got != 4 {
		t.Errorf("Validate reported %d problems, want 4:\n%v", got, err)
	}
}

func TestValidateWeights(t *testing.T) {
	if err := DefaultWeights().Validate(); err != nil {
		t.Fatalf("default weights: %v", err)
	}
	w := DefaultWeights()
	w.Native = math.NaN()
	w.Load = -1
	w.Sticky = math.Inf(1)
	w.DevFallbackClass = "Mac"
	err := w.Validate()
	for _, want := range []string{"weight native: NaN", "weight load: -1", "weight sticky: +Inf", `dev_fallback_class: "Mac"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want it to contain %q", err, want)
		}
	}
	if _, err := Place(chatRequest(), nil, Cluster{}, w); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("Place with a NaN weight: %v, want ErrInvalidRequest", err)
	}
	var zero Weights
	if err := zero.Validate(); err != nil {
		t.Errorf("zero weights are valid (no scoring): %v", err)
	}
}

func TestDefaultWeights(t *testing.T) {
	w := DefaultWeights()
	want := Weights{Native: 100, Emulated: 40, DevFallback: 20, DevFallbackClass: "node.class.dev-mac",
		AccelFit: 10, Perf: 30, InteractivePerfMultiplier: 2, Load: 10, Stickiness: 15, Sticky: 1000}
	if diff := cmp.Diff(want, w); diff != "" {
		t.Errorf("DefaultWeights (-want +got):\n%s", diff)
	}
}

func TestNodeErrors(t *testing.T) {
	tests := []struct {
		name  string
		nodes []Node
		want  string
	}{
		{"duplicate", []Node{chatNode("n-b"), chatNode("n-a"), chatNode("n-b")}, `node id "n-b" given twice`},
		{"empty id", []Node{chatNode("")}, `node[0] id ""`},
		{"unprintable id", []Node{chatNode("n-a"), chatNode("n\tb")}, `node[1] id "n\tb"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Place(chatRequest(), tt.nodes, Cluster{}, DefaultWeights())
			if !errors.Is(err, ErrInvalidNodes) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Place = %v, want ErrInvalidNodes containing %q", err, tt.want)
			}
		})
	}
}

func TestPinErrors(t *testing.T) {
	req := chatRequest()
	req.Pin = "n-zz"
	_, err := Place(req, []Node{chatNode("n-a")}, Cluster{}, DefaultWeights())
	if !errors.Is(err, ErrUnknownPin) || err.Error() != `pin names an unknown node: "n-zz"` {
		t.Errorf("unknown pin: %v", err)
	}
	_, err = Place(req, nil, Cluster{}, DefaultWeights())
	if !errors.Is(err, ErrUnknownPin) {
		t.Errorf("pin with no nodes: %v", err)
	}

	// An ineligible pin names every constraint it fails, and comes with
	// the whole decision so the refusal can be explained.
	req.Pin = "n-b"
	bad := chatNode("n-b")
	bad.Liveness = Dead
	bad.Gate, bad.GateReason = VerdictDeny, "node tier"
	d, err := Place(req, []Node{chatNode("n-a"), bad}, Cluster{}, DefaultWeights())
	var pe *PinIneligibleError
	if !errors.As(err, &pe) || !errors.Is(err, ErrPinIneligible) {
		t.Fatalf("ineligible pin: %v", err)
	}
	const want = "pinned node n-b is not eligible: constraint `liveness`: node is dead; " +
		"constraint `gate`: workload.place denied: node tier"
	if err.Error() != want {
		t.Errorf("error\n got %s\nwant %s", err, want)
	}
	if d.Chosen != nil || len(d.Candidates) != 2 || d.Pin != "n-b" {
		t.Errorf("decision with the error: chosen %v, %d candidates, pin %q", d.Chosen, len(d.Candidates), d.Pin)
	}
}

// TestNothingFitsIsNotAnError: an unplaceable workload is a decision that
// reports every node with its reasons.
func TestNothingFitsIsNotAnError(t *testing.T) {
	a, b := chatNode("n-a"), chatNode("n-b")
	a.Liveness = Dead
	b.Memory.VRAMFree = nil
	d := mustPlace(t, chatRequest(), []Node{b, a}, Cluster{}, DefaultWeights())
	if d.Chosen != nil {
		t.Fatalf("chosen %v", d.Chosen)
	}
	if diff := cmp.Diff([]string{"n-a", "n-b"}, order(d)); diff != "" {
		t.Errorf("every node, by id (-want +got):\n%s", diff)
	}
	for _, c := range d.Candidates {
		if len(c.Rejections) == 0 {
			t.Errorf("%s has no reason", c.Node)
		}
	}
	d = mustPlace(t, chatRequest(), nil, Cluster{}, DefaultWeights())
	if d.Chosen != nil || len(d.Candidates) != 0 {
		t.Errorf("no nodes: %+v", d)
	}
}

// TestPlaceProfilesOfOneSymbols: nodes are given all with Profiles of one
// Symbols, or all without; a Profile stands for the node's records and
// memory, which are then not read.
func TestPlaceProfilesOfOneSymbols(t *testing.T) {
	req, w := chatRequest(), DefaultWeights()
	nodes := []Node{chatNode("n-a"), chatNode("n-b")}
	mixed := prepared(NewSymbols(), nodes)
	mixed[1] = nodes[1]
	if _, err := Place(req, mixed, Cluster{}, w); !errors.Is(err, ErrInvalidNodes) || !strings.Contains(err.Error(), `"n-b" has no Profile`) {
		t.Errorf("some with a Profile: %v", err)
	}
	two := prepared(NewSymbols(), nodes)
	two[1].Profile = NewSymbols().Prepare(nodes[1].Capabilities, nodes[1].Memory)
	if _, err := Place(req, two, Cluster{}, w); !errors.Is(err, ErrInvalidNodes) || !strings.Contains(err.Error(), "another Symbols") {
		t.Errorf("Profiles of two Symbols: %v", err)
	}
	given := prepared(NewSymbols(), nodes)
	given[0].Capabilities, given[0].Memory = nil, Memory{} // what a Profile replaces
	given[1].Capabilities = []Capability{{ID: "os.darwin"}}
	d, err := Place(req, given, Cluster{}, w)
	if err != nil || !candidate(t, d, "n-a").Eligible() || !candidate(t, d, "n-b").Eligible() {
		t.Errorf("records read beside Profiles: %v\n%s", err, d.Explain())
	}
}

// TestPlaceWhilePreparing: Place reads a Symbols that Prepare interns
// into at the same time (run with -race); the decision is the one made
// with nothing else interned.
func TestPlaceWhilePreparing(t *testing.T) {
	syms := NewSymbols()
	nodes := prepared(syms, []Node{chatNode("n-a"), chatNode("n-b"), cpuNode("n-c")})
	want, err := Place(chatRequest(), nodes, Cluster{}, DefaultWeights())
	if err != nil || want.Chosen == nil {
		t.Fatalf("Place: %v, chosen %v", err, want.Chosen)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			syms.Prepare([]Capability{{ID: fmt.Sprintf("x.y%d.z", i), Attrs: []Attr{{Name: fmt.Sprintf("a%d", i), Value: grammar.StringValue("v")}}}}, Memory{})
		}
	}()
	for range 50 {
		got, err := Place(chatRequest(), nodes, Cluster{}, DefaultWeights())
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got, rejText); diff != "" {
			t.Fatalf("decision changed while preparing (-before +during):\n%s", diff)
		}
	}
	<-done
}

// TestDevFallbackClassIsTheDevMacNodeClass: the default dev class is the
// record a node configured with node.class: dev-mac claims.
func TestDevFallbackClassIsTheDevMacNodeClass(t *testing.T) {
	if want := grammar.CapNodeClass + ".dev-mac"; DefaultDevFallbackClass != want || !grammar.ValidNodeClass("dev-mac") {
		t.Fatalf("DefaultDevFallbackClass = %q, want %q", DefaultDevFallbackClass, want)
	}
}
