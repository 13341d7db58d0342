package engine

import (
	"errors"
	"strings"
)

// Errors of Place. "Nothing fits" is not one: it is a Decision with no
// Chosen placement.
var (
	// ErrInvalidRequest wraps every problem of a Request or of Weights,
	// joined.
	ErrInvalidRequest = errors.New("invalid placement request")
	// ErrInvalidNodes: a node id is empty, too long, not printable ASCII,
	// or given twice; or some nodes have a Profile and others not, or
	// their Profiles come from different Symbols.
	ErrInvalidNodes = errors.New("invalid nodes")
	// ErrUnknownPin: the pin names no node given to Place.
	ErrUnknownPin = errors.New("pin names an unknown node")
	// ErrPinIneligible matches every *PinIneligibleError.
	ErrPinIneligible = errors.New("pinned node is not eligible")
)

// PinIneligibleError is returned when the pinned node fails a constraint.
// It lists every rejection of the node. Place returns it together with a
// complete Decision (no Chosen), so that the refusal can be explained.
type PinIneligibleError struct {
	Node       string
	Rejections []Rejection
}

// Error names the node and every constraint it fails:
// "pinned node n-1 is not eligible: constraint `liveness`: node is dead;
// constraint `gate`: ...".
func (e *PinIneligibleError) Error() string {
	var b strings.Builder
	b.WriteString("pinned node ")
	b.WriteString(e.Node)
	b.WriteString(" is not eligible: ")
	for i, r := range e.Rejections {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString("constraint `")
		b.WriteString(string(r.Code))
		b.WriteString("`: ")
		b.WriteString(r.Detail())
	}
	return b.String()
}

// Is makes errors.Is(err, ErrPinIneligible) hold.
func (e *PinIneligibleError) Is(target error) bool { return target == ErrPinIneligible }
