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
	// recent holds strings interned lately, by a hash of their length
	// and a few bytes: nodes share most of their strings, and comparing
	// one string costs less than hashing it for the map.
	recent [1 << recentBits]recentSym
}

// recentSym is a string and 1 + its symbol; the zero value is empty.
type recentSym struct {
	s   string
	sym int32
}

const recentBits = 10

// recentSlot is where str is looked for in Symbols.recent.
func recentSlot(str string) int {
	n := len(str)
	if n == 0 {
		return 0
	}
	k := uint64(n) | uint64(str[0])<<8 | uint64(str[n/2])<<16 | uint64(str[n-1])<<24 | uint64(str[(n-1)/3])<<32 | uint64(str[n-1-n/4])<<40
	return int((k * 0x9e3779b97f4a7c15) >> (64 - recentBits))
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
	r := &s.recent[recentSlot(str)]
	if r.sym > 0 && r.s == str {
		return r.sym - 1
	}
	sym := s.internMap(str)
	*r = recentSym{s: str, sym: sym + 1}
	return sym
}

// internMap is intern without the recent strings.
func (s *Symbols) internMap(str string) int32 {
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
