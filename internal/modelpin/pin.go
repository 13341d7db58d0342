package modelpin

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"sync/atomic"
)

// MLXRuntime is the runtime whose server would load whatever model a body
// names: its bodies are pinned to "default_model", the one it serves.
const MLXRuntime = "mlx-lm"

// ErrNotObject refuses a request body that is not one JSON object.
var ErrNotObject = errors.New("request body is not a JSON object")

// maxJSONDepth bounds the nesting of a request body, as encoding/json
// bounds what it decodes.
const maxJSONDepth = 10000

// Value returns the JSON value a body's "model" is pinned to, or nil
// when the instance's model is unknown (the client's model members are
// then removed, never passed through): the served model, or
// "default_model" for mlx-lm, whose server would fetch any model named.
func Value(model, runtime string) ([]byte, error) {
	return appendValue(nil, model, runtime)
}

// appendValue appends Value's to dst; nil (not dst) when it is nil.
func appendValue(dst []byte, model, runtime string) ([]byte, error) {
	if runtime == MLXRuntime {
		model = "default_model"
	}
	if model == "" {
		return nil, nil
	}
	if plainJSON(model) {
		// What json.Marshal makes of it, without its reflection.
		return append(append(append(dst, '"'), model...), '"'), nil
	}
	v, err := json.Marshal(model)
	if err != nil {
		return nil, err
	}
	return append(dst, v...), nil
}

// plainJSON reports whether json.Marshal writes s as it is between
// quotes: printable ASCII but the quote, the backslash and the HTML
// characters it escapes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// Pin returns body with its top-level "model" member set to the
// instance's model (Value): every "model" member (any case;
// duplicates included) replaced in place and the rest of the body
// byte-identical, or a member added first when there was none; body
// itself, not a copy, when it names that model already. When the model is
// unknown the client's model members are removed. An empty body stays
// empty; anything other than one JSON object is ErrNotObject.
func Pin(body []byte, model, runtime string) ([]byte, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return body, nil
	}
	// The value is built on the stack for a model name of common length.
	var vb [64]byte
	value, err := appendValue(vb[:0], model, runtime)
	if err != nil {
		return nil, err
	}
	// The members' first backing array, on the stack for a request's
	// few.
	var inl [8]member
	members, open, err := heldMembers(body, inl[:0])
	if err != nil {
		return nil, err
	}
	if value == nil {
		return dropModel(body, members), nil
	}
	pinned := false
	for _, m := range members {
		if m.model {
			if pinned = bytes.Equal(body[m.valueStart:m.end], value); !pinned {
				break
			}
		}
	}
	if pinned {
		return body, nil
	}
	out := make([]byte, 0, len(body)+len(value)+16)
	found := false
	pos := 0
	for _, m := range members {
		if !m.model {
			continue
		}
		found = true
		out = append(out, body[pos:m.valueStart]...)
		out = append(out, value...)
		pos = m.end
	}
	if !found {
		out = append(out, body[:open+1]...)
		out = append(out, `"model":`...)
		out = append(out, value...)
		if len(members) > 0 {
			out = append(out, ',')
		}
		pos = open + 1
	}
	return append(out, body[pos:]...), nil
}

// member is the byte span of one top-level member of a JSON object.
type member struct {
	keyStart, valueStart, end int
	model                     bool // the key is "model" in any case
}

// dropModel removes the model members, keeping the others' bytes.
func dropModel(body []byte, members []member) []byte {
	if !slices.ContainsFunc(members, func(m member) bool { return m.model }) {
		return body
	}
	var out []byte
	first := true
	var last int
	for i, m := range members {
		if i == 0 {
			out = append(out, body[:m.keyStart]...)
		}
		last = m.end
		if m.model {
			continue
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = append(out, body[m.keyStart:m.end]...)
	}
	return append(out, body[last:]...)
}

// scanEvents receives the structure of the top-level object from
// jsonScan.feed, with offsets into the chunk being fed: its '{', each
// member's key (its opening quote; then whether it is "model", as soon as
// that is known, at the latest at its closing quote), the first byte of
// each member's value and the offset just past it, the commas between
// members and the closing '}'. Nothing inside member values is reported.
type scanEvents interface {
	objOpen(i int)
	keyStart(i int)
	keyDecided(model bool)
	valueStart(i int)
	valueEnd(i int)
	comma(i int)
	objClose(i int)
}

type scanState uint8

const (
	stBegin         scanState = iota // whitespace, then the top-level '{'
	stObjKeyOrEnd                    // after '{': a key or '}'
	stObjKey                         // after ',' in an object: a key
	stColon                          // after a key: ':'
	stValue                          // a value
	stArrValueOrEnd                  // after '[': a value or ']'
	stAfterValue                     // ',' or the container's end
	stString                         // inside a string
	stStrEsc                         // after '\' in a string
	stStrHex                         // inside \uXXXX
	stNumNeg                         // after '-'
	stNumZero                        // after a leading 0
	stNumInt                         // in the integer digits
	stNumDot                         // after '.'
	stNumFrac                        // in the fraction digits
	stNumE                           // after 'e' or 'E'
	stNumESign                       // after the exponent's sign
	stNumExp                         // in the exponent digits
	stLiteral                        // inside true, false or null
	stTrailer                        // after the object: whitespace only
	stFailed
)

// jsonScan validates one JSON text fed in chunks of any size, with the
// grammar and nesting bound encoding/json applies (strings are not checked
// for valid UTF-8, as json.Valid does not), and reports the structure of
// the text's top-level value, which must be an object, to a scanEvents.
// Its state is a few bytes plus one byte per open container.
type jsonScan struct {
	st    scanState
	stack []byte // '{' or '[' per open container
	lit   string // the rest of the literal being read
	hexN  uint8  // hex digits of a \u escape read so far
	hexV  rune
	// isKey: the string being read is an object's key. A key of the
	// top-level object (inKey) is compared with "model" (ASCII case
	// folded, escapes decoded) as it is read: keyN counts its characters
	// matched so far, -1 once it is decided.
	isKey bool
	inKey bool
	keyN  int8
}

// strPlain marks the bytes that stand for themselves inside a string.
var strPlain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// hasStringSpecial reports whether one of the 8 bytes of x ends or
// escapes a string's plain run: '"', '\\' or a control byte below 0x20.
// Each test is the exact "has a zero byte" (or "has a byte below n") word
// trick, so a run of plain bytes is skipped 8 at a time.
func hasStringSpecial(x uint64) bool {
	q := x ^ (wordLo * '"')
	bs := x ^ (wordLo * '\\')
	return ((q-wordLo)&^q|(bs-wordLo)&^bs)&wordHi|controlBits(x) != 0
}

// controlBits has the high bit of each of the 8 bytes of x that is below
// 0x20 set (and no other bit): non-zero when x has a control byte.
func controlBits(x uint64) uint64 { return (x - wordLo*0x20) &^ x & wordHi }

// The word tricks' constants: each byte 0x01, each byte 0x80.
const wordLo, wordHi = 0x0101010101010101, 0x8080808080808080

// plainRun returns the offset of the first byte at or after j that ends
// or escapes a string's plain run, or len(b). It looks for '"' and '\\'
// with bytes.IndexByte (vector instructions) and for control bytes 32 at
// a time, in windows that double from 64 bytes: a run of escapes costs a
// small window each, a long run a few large ones (about four times the
// word-at-a-time loop's speed on a long string).
func plainRun(b []byte, j int) int {
	for w := 64; j < len(b); w = min(2*w, 64<<10) {
		win := b[j:min(len(b), j+w)]
		k := len(win)
		if q := bytes.IndexByte(win, '"'); q >= 0 {
			k = q
		}
		if e := bytes.IndexByte(win[:k], '\\'); e >= 0 {
			k = e
		}
		if c := firstControl(win[:k]); c >= 0 {
			k = c
		}
		if k < len(win) {
			return j + k
		}
		j += len(win)
	}
	return j
}

// firstControl returns the offset of the first byte of b below 0x20, or
// -1.
func firstControl(b []byte) int {
	j := 0
	for ; j+32 <= len(b); j += 32 {
		w := b[j : j+32 : j+32]
		if controlBits(binary.LittleEndian.Uint64(w[0:]))|controlBits(binary.LittleEndian.Uint64(w[8:]))|
			controlBits(binary.LittleEndian.Uint64(w[16:]))|controlBits(binary.LittleEndian.Uint64(w[24:])) != 0 {
			break
		}
	}
	for ; j < len(b); j++ {
		if b[j] < 0x20 {
			return j
		}
	}
	return -1
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func hexVal(c byte) (rune, bool) {
	switch {
	case c >= '0' && c <= '9':
		return rune(c - '0'), true
	case c >= 'a' && c <= 'f':
		return rune(c-'a') + 10, true
	case c >= 'A' && c <= 'F':
		return rune(c-'A') + 10, true
	}
	return 0, false
}

// fail stops the scan: every later feed fails too.
func (s *jsonScan) fail() error {
	s.st = stFailed
	return ErrNotObject
}

// finish reports whether the text fed so far is complete: one object and
// whitespace. Whitespace alone is not.
func (s *jsonScan) finish() error {
	if s.st != stTrailer {
		return s.fail()
	}
	return nil
}

// keyChar compares one decoded character of a top-level key with "model".
func (s *jsonScan) keyChar(r rune, ev scanEvents) {
	if s.keyN < 0 {
		return
	}
	if r >= 'A' && r <= 'Z' {
		r += 'a' - 'A'
	}
	if s.keyN >= 5 || r != rune("model"[s.keyN]) {
		s.keyN = -1
		ev.keyDecided(false)
		return
	}
	s.keyN++
}

// valueDone moves past a complete value that ended just before offset
// end.
func (s *jsonScan) valueDone(end int, ev scanEvents) {
	if len(s.stack) == 1 {
		ev.valueEnd(end)
	}
	s.st = stAfterValue
}

// beginValue starts the value whose first byte c is at offset i.
func (s *jsonScan) beginValue(c byte, i int, ev scanEvents) error {
	if len(s.stack) == 1 {
		ev.valueStart(i)
	}
	switch {
	case c == '{' || c == '[':
		if len(s.stack) >= maxJSONDepth {
			return s.fail()
		}
		s.stack = append(s.stack, c)
		if c == '{' {
			s.st = stObjKeyOrEnd
		} else {
			s.st = stArrValueOrEnd
		}
	case c == '"':
		s.st, s.isKey, s.inKey = stString, false, false
	case c == '-':
		s.st = stNumNeg
	case c == '0':
		s.st = stNumZero
	case c >= '1' && c <= '9':
		s.st = stNumInt
	case c == 't':
		s.st, s.lit = stLiteral, "rue"
	case c == 'f':
		s.st, s.lit = stLiteral, "alse"
	case c == 'n':
		s.st, s.lit = stLiteral, "ull"
	default:
		return s.fail()
	}
	return nil
}

// closeContainer handles the ']' or '}' c at offset i.
func (s *jsonScan) closeContainer(c byte, i int, ev scanEvents) error {
	open := byte('{')
	if c == ']' {
		open = '['
	}
	if s.stack[len(s.stack)-1] != open {
		return s.fail()
	}
	s.stack = s.stack[:len(s.stack)-1]
	switch len(s.stack) {
	case 0:
		ev.objClose(i)
		s.st = stTrailer
	default:
		s.valueDone(i+1, ev)
	}
	return nil
}

// feed scans the next chunk of the text. Offsets given to ev are offsets
// into b. An invalid text is ErrNotObject, at once and on every later
// call.
func (s *jsonScan) feed(b []byte, ev scanEvents) error {
	if s.st == stFailed {
		return ErrNotObject
	}
	for i := 0; i < len(b); {
		c := b[i]
		switch s.st {
		case stString:
			if !s.inKey || s.keyN < 0 {
				j := i
				for n := 0; j+8 <= len(b) && !hasStringSpecial(binary.LittleEndian.Uint64(b[j:])); n++ {
					if j += 8; n == 3 {
						// 32 plain bytes: a long run (a prompt,
						// an image's base64), skipped faster.
						j = plainRun(b, j)
						break
					}
				}
				for j < len(b) && strPlain[b[j]] {
					j++
				}
				if i = j; i == len(b) {
					return nil
				}
				c = b[i]
			}
			switch {
			case c == '"':
				if s.isKey {
					if s.inKey && s.keyN >= 0 {
						ev.keyDecided(s.keyN == 5)
						s.keyN = -1
					}
					s.isKey, s.inKey = false, false
					s.st = stColon
				} else {
					s.valueDone(i+1, ev)
				}
			case c == '\\':
				s.st = stStrEsc
			case c < 0x20:
				return s.fail()
			case c >= 0x80:
				s.keyChar(0x80, ev) // no non-ASCII character folds to one of "model"
			default:
				s.keyChar(rune(c), ev)
			}
			i++
		case stStrEsc:
			var r rune
			switch c {
			case '"', '\\', '/':
				r = rune(c)
			case 'b', 'f', 'n', 'r', 't':
				r = 0x08 // a control character: never in "model"
			case 'u':
				s.st, s.hexN, s.hexV = stStrHex, 0, 0
				i++
				continue
			default:
				return s.fail()
			}
			if s.inKey {
				s.keyChar(r, ev)
			}
			s.st = stString
			i++
		case stStrHex:
			v, ok := hexVal(c)
			if !ok {
				return s.fail()
			}
			s.hexV = s.hexV<<4 | v
			if s.hexN++; s.hexN == 4 {
				if s.inKey {
					s.keyChar(s.hexV, ev)
				}
				s.st = stString
			}
			i++
		case stBegin, stObjKeyOrEnd, stObjKey, stColon, stValue, stArrValueOrEnd, stAfterValue, stTrailer:
			if isSpace(c) {
				i++
				continue
			}
			if err := s.structural(c, i, ev); err != nil {
				return err
			}
			i++
		case stNumNeg:
			switch {
			case c == '0':
				s.st = stNumZero
			case c >= '1' && c <= '9':
				s.st = stNumInt
			default:
				return s.fail()
			}
			i++
		case stNumZero, stNumInt, stNumFrac, stNumExp:
			switch {
			case c >= '0' && c <= '9' && s.st != stNumZero:
			case c == '.' && (s.st == stNumZero || s.st == stNumInt):
				s.st = stNumDot
			case (c == 'e' || c == 'E') && s.st != stNumExp:
				s.st = stNumE
			default:
				// The number ended before c, which is scanned again
				// after it.
				s.valueDone(i, ev)
				continue
			}
			i++
		case stNumDot:
			if c < '0' || c > '9' {
				return s.fail()
			}
			s.st = stNumFrac
			i++
		case stNumE:
			switch {
			case c == '+' || c == '-':
				s.st = stNumESign
			case c >= '0' && c <= '9':
				s.st = stNumExp
			default:
				return s.fail()
			}
			i++
		case stNumESign:
			if c < '0' || c > '9' {
				return s.fail()
			}
			s.st = stNumExp
			i++
		case stLiteral:
			if c != s.lit[0] {
				return s.fail()
			}
			if s.lit = s.lit[1:]; s.lit == "" {
				s.valueDone(i+1, ev)
			}
			i++
		default:
			return s.fail()
		}
	}
	return nil
}

// structural handles the byte c at offset i, not whitespace, outside
// strings, numbers and literals.
func (s *jsonScan) structural(c byte, i int, ev scanEvents) error {
	switch s.st {
	case stBegin:
		if c != '{' {
			return s.fail()
		}
		s.stack = append(s.stack, c)
		ev.objOpen(i)
		s.st = stObjKeyOrEnd
	case stObjKeyOrEnd, stObjKey:
		switch {
		case c == '"':
			s.st, s.isKey, s.inKey = stString, true, len(s.stack) == 1
			if s.inKey {
				s.keyN = 0
				ev.keyStart(i)
			}
		case c == '}' && s.st == stObjKeyOrEnd:
			return s.closeContainer(c, i, ev)
		default:
			return s.fail()
		}
	case stColon:
		if c != ':' {
			return s.fail()
		}
		s.st = stValue
	case stValue:
		return s.beginValue(c, i, ev)
	case stArrValueOrEnd:
		if c == ']' {
			return s.closeContainer(c, i, ev)
		}
		return s.beginValue(c, i, ev)
	case stAfterValue:
		switch {
		case c == ',':
			if s.stack[len(s.stack)-1] == '{' {
				if len(s.stack) == 1 {
					ev.comma(i)
				}
				s.st = stObjKey
			} else {
				s.st = stValue
			}
		case c == '}' || c == ']':
			return s.closeContainer(c, i, ev)
		default:
			return s.fail()
		}
	default: // stTrailer: nothing but whitespace after the object
		return s.fail()
	}
	return nil
}

// pinGrowthBytes is the most a streamed body grows by pinning, beyond the
// pinned value itself: a member `,"model":` added at its end.
const pinGrowthBytes = len(`,"model":`)

// Reader is a request body streamed to a local instance with its
// "model" pinned, for bodies too large to hold (Pin's rule, applied
// on the fly): the first top-level "model" member (any case) gets the
// pinned value, later ones are removed, and a body without one gets it
// added as its last member; with the model unknown every model member is
// removed. Other bytes pass unchanged (top-level commas are rewritten to
// match the members kept). When the source's length is known, the output
// is padded with trailing spaces to exactly that length plus
// pinGrowthBytes and the value's length, so that the request can carry a
// Content-Length before the body is read (some servers read nothing
// else). A body that is not one JSON object fails with ErrNotObject as
// soon as that is known: the instance then gets a truncated request,
// never a complete one. Memory is one input chunk, one output chunk and a
// few bytes of a key being read, whatever the body's size.
//
// Read is called by one goroutine at a time (the HTTP transport's);
// Failure may be called from any goroutine.
type Reader struct {
	src   io.Reader
	value []byte // the pinned value; nil: remove model members
	in    []byte // input chunk
	out   []byte // output of the last chunk; out[off:] not yet read
	off   int
	sc    jsonScan
	cur   []byte // the chunk being fed, for the scanEvents methods

	mark      int    // offset in cur from which bytes are still to be written
	hold      []byte // bytes of a top-level key begun in an earlier chunk, not yet decided
	holding   bool   // between a key's start and its decision
	dropping  bool   // inside a removed member: key to end of value
	replacing bool   // inside the kept model member: its value is replaced
	skipping  bool   // inside the replaced value
	pinned    bool   // the pinned member was written
	members   int    // top-level members written

	written int64 // bytes written before padding
	total   int64 // output length, -1 when unknown
	pad     int64 // padding left to write
	srcDone bool
	err     error // sticky: io.EOF at the end, else the failure

	failed   atomic.Pointer[error] // first failure, for failure()
	srcEnded atomic.Bool           // the source was read to its end, for complete()
}

// NewReader pins src (srcLen bytes, -1 unknown) to value (nil: remove
// model members), reading it in chunks of chunk bytes.
func NewReader(src io.Reader, srcLen int64, value []byte, chunk int) *Reader {
	r := &Reader{src: src, value: value, total: -1,
		in: make([]byte, chunk), out: make([]byte, 0, chunk+2*len(value)+2*pinGrowthBytes+64)}
	if srcLen >= 0 {
		r.total = srcLen
		if value != nil {
			r.total += int64(pinGrowthBytes + len(value))
		}
	}
	return r
}

// Length is the output's length, -1 when unknown.
func (r *Reader) Length() int64 { return r.total }

// BufferedBytes is the memory the reader holds.
func (r *Reader) BufferedBytes() int64 { return int64(cap(r.in) + cap(r.out)) }

// Complete reports whether the source was read to its end (so is read no
// more).
func (r *Reader) Complete() bool { return r.srcEnded.Load() }

// Failure returns why reading failed (the source's error or ErrNotObject),
// nil when it has not.
func (r *Reader) Failure() error {
	if p := r.failed.Load(); p != nil {
		return *p
	}
	return nil
}

func (r *Reader) setErr(err error) {
	r.err = err
	if err != io.EOF {
		r.failed.CompareAndSwap(nil, &err)
	}
}

func (r *Reader) Read(p []byte) (int, error) {
	for r.off == len(r.out) {
		switch {
		case r.err != nil:
			return 0, r.err
		case r.srcDone && r.pad > 0:
			n := int(min(int64(len(p)), r.pad))
			for i := range p[:n] {
				p[i] = ' '
			}
			r.pad -= int64(n)
			return n, nil
		case r.srcDone:
			r.setErr(io.EOF)
			continue
		}
		r.out, r.off = r.out[:0], 0
		// Whole chunks: each becomes one write to the instance, whose
		// connection would otherwise take a syscall per QUIC packet.
		n, err := io.ReadFull(r.src, r.in)
		if err == io.ErrUnexpectedEOF {
			err = io.EOF
		}
		if n > 0 {
			if ferr := r.transform(r.in[:n]); ferr != nil {
				r.out = r.out[:0]
				r.setErr(ferr)
				continue
			}
		}
		switch {
		case err == io.EOF:
			if ferr := r.end(); ferr != nil {
				r.out = r.out[:0]
				r.setErr(ferr)
			}
		case err != nil:
			r.setErr(err)
		}
	}
	n := copy(p, r.out[r.off:])
	r.off += n
	return n, nil
}

// end checks the body is complete and sets the padding.
func (r *Reader) end() error {
	r.srcDone = true
	r.srcEnded.Store(true)
	// Whitespace alone passes as it is, as Pin lets it.
	if r.sc.st != stBegin {
		if err := r.sc.finish(); err != nil {
			return err
		}
	}
	if r.total >= 0 {
		if r.written > r.total {
			return errors.New("pinned body longer than its bound") // cannot happen: the bound is the most it grows
		}
		r.pad = r.total - r.written
	}
	return nil
}

func (r *Reader) emit(b []byte) {
	r.out = append(r.out, b...)
	r.written += int64(len(b))
}

// transform scans one chunk and appends its output to r.out.
func (r *Reader) transform(chunk []byte) error {
	r.cur, r.mark = chunk, 0
	if err := r.sc.feed(chunk, r); err != nil {
		return err
	}
	switch {
	case r.holding:
		r.hold = append(r.hold, chunk[r.mark:]...)
	case r.dropping || r.skipping:
	default:
		r.emit(chunk[r.mark:])
	}
	return nil
}

func (r *Reader) objOpen(int) {}

// comma drops the top-level commas; keepMember writes the ones needed.
func (r *Reader) comma(i int) {
	r.emit(r.cur[r.mark:i])
	r.mark = i + 1
}

func (r *Reader) keyStart(i int) {
	r.emit(r.cur[r.mark:i])
	r.mark = i
	r.holding = true
	r.hold = r.hold[:0]
}

func (r *Reader) keyDecided(model bool) {
	r.holding = false
	if model && (r.value == nil || r.pinned) {
		r.dropping = true
		r.hold = r.hold[:0]
		return
	}
	if model {
		r.replacing, r.pinned = true, true
	}
	if r.members > 0 {
		r.emit([]byte{','})
	}
	r.members++
	r.emit(r.hold)
	r.hold = r.hold[:0]
}

func (r *Reader) valueStart(i int) {
	if r.replacing {
		r.emit(r.cur[r.mark:i])
		r.skipping = true
	}
}

func (r *Reader) valueEnd(i int) {
	switch {
	case r.replacing:
		r.emit(r.value)
		r.replacing, r.skipping = false, false
		r.mark = i
	case r.dropping:
		r.dropping = false
		r.mark = i
	}
}

func (r *Reader) objClose(i int) {
	if r.value == nil || r.pinned {
		return
	}
	r.emit(r.cur[r.mark:i])
	r.mark = i
	if r.members > 0 {
		r.emit([]byte{','})
	}
	r.emit([]byte(`"model":`))
	r.emit(r.value)
	r.pinned = true
}
