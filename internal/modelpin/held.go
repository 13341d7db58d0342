package modelpin

import "encoding/binary"

// heldMembers validates body, held whole, as one JSON object and appends
// its top-level members to members, returning them (nil when it has
// none) and the offset of its '{'. It accepts what jsonScan accepts and
// finds the same members: jsonScan is a state machine for a body fed in
// chunks, which reports through an interface, a call per event, and a
// body held whole needs neither (FuzzHeldMembers holds the two equal).
func heldMembers(b []byte, members []member) ([]member, int, error) {
	i := skipSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return nil, 0, ErrNotObject
	}
	open := i
	if i = skipSpace(b, i+1); i < len(b) && b[i] == '}' {
		if skipSpace(b, i+1) != len(b) {
			return nil, 0, ErrNotObject
		}
		return nil, open, nil
	}
	// stk is the nesting stack of member values, on Pin's stack for
	// any request of common depth.
	var stk [32]byte
	for {
		if i == len(b) || b[i] != '"' {
			return nil, 0, ErrNotObject
		}
		m := member{keyStart: i}
		end, plain := skipString(b, i+1)
		if end < 0 {
			return nil, 0, ErrNotObject
		}
		if plain {
			m.model = end-i == 7 && b[i+1]|0x20 == 'm' && b[i+2]|0x20 == 'o' && b[i+3]|0x20 == 'd' &&
				b[i+4]|0x20 == 'e' && b[i+5]|0x20 == 'l'
		} else {
			m.model = escapedModelKey(b[i+1 : end-1])
		}
		if i = skipSpace(b, end); i == len(b) || b[i] != ':' {
			return nil, 0, ErrNotObject
		}
		m.valueStart = skipSpace(b, i+1)
		if m.end = skipValue(b, m.valueStart, stk[:0]); m.end < 0 {
			return nil, 0, ErrNotObject
		}
		members = append(members, m)
		if i = skipSpace(b, m.end); i == len(b) {
			return nil, 0, ErrNotObject
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			if skipSpace(b, i+1) != len(b) {
				return nil, 0, ErrNotObject
			}
			return members, open, nil
		default:
			return nil, 0, ErrNotObject
		}
	}
}

// skipSpace returns the offset of the first byte at or after i that is
// not JSON whitespace, or len(b).
func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// skipString returns the offset just past the string whose opening quote
// is just before i, and whether it has no escape; -1 when it is not
// valid JSON.
func skipString(b []byte, i int) (int, bool) {
	plain := true
	for {
		// Plain bytes 8 at a time, then a long run as jsonScan skips
		// it.
		for n := 0; i+8 <= len(b) && !hasStringSpecial(binary.LittleEndian.Uint64(b[i:])); n++ {
			if i += 8; n == 3 {
				i = plainRun(b, i)
				break
			}
		}
		for i < len(b) && strPlain[b[i]] {
			i++
		}
		if i == len(b) {
			return -1, false
		}
		switch b[i] {
		case '"':
			return i + 1, plain
		case '\\':
			plain = false
			if i+1 == len(b) {
				return -1, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return -1, false
				}
				for _, c := range b[i+2 : i+6] {
					if _, ok := hexVal(c); !ok {
						return -1, false
					}
				}
				i += 6
			default:
				return -1, false
			}
		default: // a control byte
			return -1, false
		}
	}
}

// escapedModelKey reports whether the valid string content k, which has
// escapes, is "model" in any ASCII case once they are decoded, as
// jsonScan.keyChar decides it.
func escapedModelKey(k []byte) bool {
	n := 0
	for i := 0; i < len(k); n++ {
		r := rune(k[i])
		i++
		if r == '\\' {
			switch k[i] {
			case 'u':
				r = 0
				for _, c := range k[i+1 : i+5] {
					v, _ := hexVal(c)
					r = r<<4 | v
				}
				i += 5
			case 'b', 'f', 'n', 'r', 't':
				r = 0x08 // a control character: never in "model"
				i++
			default: // '"', '\\' or '/', itself
				r = rune(k[i])
				i++
			}
		}
		if r >= 'A' && r <= 'Z' {
			r += 'a' - 'A'
		}
		if n >= 5 || r != rune("model"[n]) {
			return false
		}
	}
	return n == 5
}

// skipValue returns the offset just past the JSON value that starts at
// i, -1 when there is none there or it is not valid. stk is its nesting
// stack's first backing array (empty); the value is nested in the
// top-level object, so it may open maxJSONDepth-1 containers at most.
func skipValue(b []byte, i int, stk []byte) int {
	for {
		// A value starts at i.
		if i == len(b) {
			return -1
		}
		switch c := b[i]; {
		case c == '{' || c == '[':
			if len(stk)+1 >= maxJSONDepth {
				return -1
			}
			stk = append(stk, c)
			if i = skipSpace(b, i+1); i == len(b) {
				return -1
			}
			if c == '[' {
				if b[i] != ']' {
					continue
				}
			} else if b[i] != '}' {
				if i = skipKey(b, i); i < 0 {
					return -1
				}
				continue
			}
			stk = stk[:len(stk)-1]
			i++
		case c == '"':
			if i, _ = skipString(b, i+1); i < 0 {
				return -1
			}
		case c == '-' || c >= '0' && c <= '9':
			if i = skipNumber(b, i); i < 0 {
				return -1
			}
		case c == 't':
			if i = skipLiteral(b, i, "true"); i < 0 {
				return -1
			}
		case c == 'f':
			if i = skipLiteral(b, i, "false"); i < 0 {
				return -1
			}
		case c == 'n':
			if i = skipLiteral(b, i, "null"); i < 0 {
				return -1
			}
		default:
			return -1
		}
		// A value ended just before i: the next one, or the ends of the
		// containers it completes.
		for {
			if len(stk) == 0 {
				return i
			}
			if i = skipSpace(b, i); i == len(b) {
				return -1
			}
			top := stk[len(stk)-1]
			c := b[i]
			if c == ',' {
				if i = skipSpace(b, i+1); top == '{' {
					if i = skipKey(b, i); i < 0 {
						return -1
					}
				}
				break
			}
			if c != top+2 { // '[' + 2 is ']', '{' + 2 is '}'
				return -1
			}
			stk = stk[:len(stk)-1]
			i++
		}
	}
}

// skipKey returns the offset of the value of the nested object's member
// whose key starts at i: past the key, the colon and whitespace; -1 when
// they are not there.
func skipKey(b []byte, i int) int {
	if i == len(b) || b[i] != '"' {
		return -1
	}
	if i, _ = skipString(b, i+1); i < 0 {
		return -1
	}
	if i = skipSpace(b, i); i == len(b) || b[i] != ':' {
		return -1
	}
	return skipSpace(b, i+1)
}

// skipNumber returns the offset just past the number that starts at i,
// -1 when it is not valid JSON. A number's end is wherever its grammar
// ends: what follows is the caller's to judge.
func skipNumber(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	switch {
	case i == len(b):
		return -1
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		i = skipDigits(b, i+1)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		if j := skipDigits(b, i+1); j > i+1 {
			i = j
		} else {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if j := skipDigits(b, i); j > i {
			i = j
		} else {
			return -1
		}
	}
	return i
}

func skipDigits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// skipLiteral returns the offset just past lit at i, -1 when it is not
// there.
func skipLiteral(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}
