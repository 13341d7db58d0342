package engine

import (
	"strings"
	"sync"
)

// Symbols interns the strings of capability records (ids, attribute
// names, string values) as small integers, so that a decision compares
// integers where it would compare strings. A capability id is interned
// after its dot-prefixes ("accel", "accel.gpu", then "accel.gpu.nvidia"),
// and each symbol knows the symbol of its id up to its last dot: a
// selector selects an id when it is the id or one of those ancestors.
//
// The caller keeps one Symbols with the Profiles it prepared (Prepare),
// for as long as it keeps them. It only grows: a caller whose nodes come
// and go starts a new one (and prepares its nodes again) when Len grows
// well past what its live nodes use. Symbols is safe for concurrent use:
// Prepare may run while Place reads the symbols.
type Symbols struct {
	mu     sync.RWMutex
	index  map[string]int32
	parent []int32 // per symbol: the symbol of its dot-prefix, or -1
}

// NewSymbols returns an empty vocabulary.
func NewSymbols() *Symbols {
	return &Symbols{index: make(map[string]int32)}
}

// Len returns how many strings are interned.
func (s *Symbols) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.parent)
}

// intern returns the symbol of str, interning its dot-prefixes first;
// the caller holds mu for writing.
func (s *Symbols) intern(str string) int32 {
	if sym, ok := s.index[str]; ok {
		return sym
	}
	parent := int32(-1)
	if i := strings.LastIndexByte(str, '.'); i > 0 {
		parent = s.intern(str[:i])
	}
	sym := int32(len(s.parent))
	s.index[str] = sym
	s.parent = append(s.parent, parent)
	return sym
}

// noSymbol is the symbol of a string that is not interned: no capability
// holds it.
const noSymbol int32 = -1

// view is what one decision reads of the symbols: the lookups the request
// needs, done under one lock, and the parents of every symbol interned
// before it (parents are never rewritten, so reading them needs no lock).
type view struct {
	parent []int32
}

// lookup returns the symbol of each string, or noSymbol, and a view of
// the parents.
func (s *Symbols) lookup(strs []string, syms []int32) view {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for i, str := range strs {
		sym, ok := s.index[str]
		if !ok {
			sym = noSymbol
		}
		syms[i] = sym
	}
	return view{parent: s.parent[:len(s.parent):len(s.parent)]}
}
