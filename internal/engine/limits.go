package engine

import "github.com/nodeld/nodeld/internal/grammar"

// Bounds of a Request, checked by Request.Validate (reference 3.6.1).
const (
	// MaxTextLen bounds a workload name, a label, an exclude, a revocable
	// ref and a node id named by the request (pin, current node, prefer,
	// avoid) or given in Node.ID.
	MaxTextLen = 256
	// MaxVariants bounds Request.Variants.
	MaxVariants = 16
	// MaxRequirements bounds each requirement list: the common one and
	// each variant's.
	MaxRequirements = 64
	// MaxPredicates bounds the predicates of one requirement.
	MaxPredicates = 32
	// MaxCount bounds Requirement.Count.
	MaxCount = 64
	// MaxListLen bounds labels, excludes, revocable refs, preferences,
	// prefer and avoid, each.
	MaxListLen = 64
	// MaxOperandList bounds the list operand of an "in" predicate.
	MaxOperandList = 64
)

// MaxJointSteps bounds the search for a joint assignment of exclusive
// capabilities to one route's requirements on one node. A search that
// exhausts it fails as contended, like one that finds no assignment.
const MaxJointSteps = 100_000

// Attribute names the engine reads. Any other attribute is only ever
// tested by predicates.
const (
	// AttrMemBytes is an accelerator's memory in bytes: the capacity
	// behind the accel_fit score.
	AttrMemBytes = "mem_bytes"
	// AttrValue is the figure of a measured perf capability
	// ("perf.infer.chat" value 41.5).
	AttrValue = "value"
)

// accelFamily is the capability family of accelerators: the ones
// accel_fit scores and Placement.Accelerator names.
const accelFamily = "accel"

// Short names for grammar's operators, in this package's hot paths.
const (
	opEq  = grammar.OpEq
	opGte = grammar.OpGte
	opLte = grammar.OpLte
	opIn  = grammar.OpIn
	opHas = grammar.OpHas
)
