package meshproxy

import (
	"net/http"
	"strconv"

	"github.com/nodeld/nodeld/internal/httpfast"
	"github.com/nodeld/nodeld/internal/mesh"
)

// The heads of a KindInfer exchange are JSON (meshRequestHead,
// meshResponseHead). encoding/json's reflection was a tenth of either
// node's CPU per small request, so heads are written by hand, in the
// field order json.Marshal uses, and read by a parser of exactly that
// form; anything else a peer sends (other spacing, key order, escapes,
// non-ASCII) goes to encoding/json as before. The fast parser accepts
// only what encoding/json decodes to the same head (for a response head,
// the same relayed headers: the consumer keeps no others)
// (FuzzHeadFastPath), so it changes what is accepted in nothing.

// appendJSONString appends s as a JSON string: '"' and '\' escaped, control
// bytes as \u00XX, everything else as it is (head fields are checked
// ASCII before they are sent). The runs between escapes are appended
// whole, not a byte at a time: a head's fields most often have none.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	from := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[from:i]...)
		if c < 0x20 {
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		} else {
			dst = append(dst, '\\', c)
		}
		from = i + 1
	}
	dst = append(dst, s[from:]...)
	return append(dst, '"')
}

// appendRequestHeadFrame appends h as a request head frame.
func appendRequestHeadFrame(dst []byte, h meshRequestHead) []byte {
	at := len(dst)
	dst = mesh.AppendFrameHeader(dst, frameReqHead, 0)
	start := len(dst)
	dst = append(dst, `{"v":`...)
	dst = strconv.AppendInt(dst, int64(h.V), 10)
	dst = append(dst, `,"role":`...)
	dst = appendJSONString(dst, h.Role)
	dst = append(dst, `,"method":`...)
	dst = appendJSONString(dst, h.Method)
	dst = append(dst, `,"path":`...)
	dst = appendJSONString(dst, h.Path)
	if h.Query != "" {
		dst = append(dst, `,"query":`...)
		dst = appendJSONString(dst, h.Query)
	}
	if h.ContentType != "" {
		dst = append(dst, `,"content_type":`...)
		dst = appendJSONString(dst, h.ContentType)
	}
	if h.Accept != "" {
		dst = append(dst, `,"accept":`...)
		dst = appendJSONString(dst, h.Accept)
	}
	dst = append(dst, `,"body_bytes":`...)
	dst = strconv.AppendInt(dst, h.BodyBytes, 10)
	dst = append(dst, '}')
	mesh.AppendFrameHeader(dst[:at], frameReqHead, len(dst)-start)
	return dst
}

// appendResponseHeadFrame appends the response head of an instance's
// answer (status, and the relayed headers it has with safe values) as a
// frame, and returns the head's Content-Type.
func appendResponseHeadFrame(dst []byte, status int, hdr http.Header) ([]byte, string) {
	at := len(dst)
	dst = mesh.AppendFrameHeader(dst, frameRespHead, 0)
	start := len(dst)
	dst = append(dst, `{"v":`...)
	dst = strconv.AppendInt(dst, MeshWireVersion, 10)
	dst = append(dst, `,"status":`...)
	dst = strconv.AppendInt(dst, int64(status), 10)
	var contentType string
	sep := `,"headers":{`
	for i, name := range relayedResponseHeaders {
		v := httpfast.Value(hdr, name) // canonical names (TestRelayedHeadersCanonical)
		if !validHeaderValue(v) {
			continue
		}
		if i == hdrContentType {
			contentType = v
		}
		dst = append(dst, sep...)
		sep = ","
		dst = append(dst, relayedHeaderKeys[i]...)
		dst = appendJSONString(dst, v)
	}
	if sep == "," {
		dst = append(dst, '}')
	}
	dst = append(dst, '}')
	mesh.AppendFrameHeader(dst[:at], frameRespHead, len(dst)-start)
	return dst, contentType
}

// relayedHeaderKeys is each of relayedResponseHeaders as a head's member
// key: what appendJSONString and a colon make of it, written once.
var relayedHeaderKeys = func() (k [len(relayedResponseHeaders)]string) {
	for i, name := range relayedResponseHeaders {
		k[i] = string(appendJSONString(nil, name)) + ":"
	}
	return k
}()

// headParser reads the hand-written form of a head.
type headParser struct {
	b []byte
	i int
}

// lit reads s. Inlined with s a constant, the comparison is a few loads
// and compares of the constant's length, not a call.
func (p *headParser) lit(s string) bool {
	if len(p.b)-p.i < len(s) || string(p.b[p.i:p.i+len(s)]) != s {
		return false
	}
	p.i += len(s)
	return true
}

// str reads a string of printable ASCII without escapes.
func (p *headParser) str() (string, bool) { return p.strAs("") }

// strAs is str, returning known itself, not a new string, when what is
// read equals it.
func (p *headParser) strAs(known string) (string, bool) {
	b, ok := p.raw()
	switch {
	case !ok:
		return "", false
	case known != "" && string(b) == known:
		return known, true
	}
	return internHeadString(b), true
}

// raw reads what str does, and returns it in p's bytes.
func (p *headParser) raw() ([]byte, bool) {
	if !p.lit(`"`) {
		return nil, false
	}
	j := p.i
	for j < len(p.b) && headStrByte[p.b[j]] {
		j++
	}
	if j == len(p.b) || p.b[j] != '"' {
		return nil, false
	}
	b := p.b[p.i:j]
	p.i = j + 1
	return b, true
}

// headStrByte marks the bytes raw reads inside a string: printable
// ASCII but '"' and '\\'. One load a byte, where four comparisons were
// most of a head's parsing.
var headStrByte = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// internHeadString returns b as a string, without allocating for the
// values most heads carry (a string per field was a third of the
// allocations of a small request on each node).
func internHeadString(b []byte) string {
	switch string(b) { // compiled without a conversion
	case "POST":
		return "POST"
	case "GET":
		return "GET"
	case "/v1/chat/completions":
		return "/v1/chat/completions"
	case "/v1/completions":
		return "/v1/completions"
	case "/v1/embeddings":
		return "/v1/embeddings"
	case "application/json":
		return "application/json"
	case "text/event-stream":
		return "text/event-stream"
	case "Content-Type":
		return "Content-Type"
	case "Content-Length":
		return "Content-Length"
	case "Cache-Control":
		return "Cache-Control"
	case "no-cache":
		return "no-cache"
	}
	return string(b)
}

// int reads a JSON integer of at most 18 digits.
func (p *headParser) int() (int64, bool) {
	j := p.i
	neg := j < len(p.b) && p.b[j] == '-'
	if neg {
		j++
	}
	d := j
	var v int64
	for j < len(p.b) && p.b[j] >= '0' && p.b[j] <= '9' && j-d < 18 {
		v = v*10 + int64(p.b[j]-'0')
		j++
	}
	if j == d || (p.b[d] == '0' && j-d > 1) || (j < len(p.b) && p.b[j] >= '0' && p.b[j] <= '9') {
		return 0, false
	}
	p.i = j
	if neg {
		v = -v
	}
	return v, true
}

func (p *headParser) end() bool { return p.lit("}") && p.i == len(p.b) }

// parseRequestHeadFast reads what appendRequestHeadFrame writes; ok is
// false for any other form. A role equal to role (the last head's on a
// served connection, or "") is role itself: a connection's requests
// name one role, which then costs one string, not one a request.
func parseRequestHeadFast(b []byte, role string) (h meshRequestHead, ok bool) {
	p := headParser{b: b}
	var v int64
	if !p.lit(`{"v":`) {
		return h, false
	}
	if v, ok = p.int(); !ok || !p.lit(`,"role":`) {
		return h, false
	}
	h.V = int(v)
	if h.Role, ok = p.strAs(role); !ok || !p.lit(`,"method":`) {
		return h, false
	}
	if h.Method, ok = p.str(); !ok || !p.lit(`,"path":`) {
		return h, false
	}
	if h.Path, ok = p.str(); !ok {
		return h, false
	}
	if p.lit(`,"query":`) {
		if h.Query, ok = p.str(); !ok {
			return h, false
		}
	}
	if p.lit(`,"content_type":`) {
		if h.ContentType, ok = p.str(); !ok {
			return h, false
		}
	}
	if p.lit(`,"accept":`) {
		if h.Accept, ok = p.str(); !ok {
			return h, false
		}
	}
	if !p.lit(`,"body_bytes":`) {
		return h, false
	}
	if h.BodyBytes, ok = p.int(); !ok || !p.end() {
		return h, false
	}
	return h, true
}

// parseResponseHeadFast reads what appendResponseHeadFrame writes; ok is
// false for any other form. The relayed headers go into h.Headers, as
// they are (decodeResponseHead checks their values); others are read
// over, and a name given twice keeps its last value, as encoding/json
// does with a map. A head of more than maxFastHeadFields headers is not
// read here (encoding/json reads it).
func parseResponseHeadFast(b []byte) (h responseHead, ok bool) {
	p := headParser{b: b}
	var v int64
	if !p.lit(`{"v":`) {
		return h, false
	}
	if v, ok = p.int(); !ok || !p.lit(`,"status":`) {
		return h, false
	}
	h.V = int(v)
	if v, ok = p.int(); !ok {
		return h, false
	}
	h.Status = int(v)
	if p.lit(`,"headers":{`) {
		for n := 0; !p.lit("}"); n++ {
			if (n > 0 && !p.lit(",")) || n == maxFastHeadFields {
				return h, false
			}
			k, ok := p.raw()
			if !ok || !p.lit(":") {
				return h, false
			}
			v, ok := p.raw()
			if !ok {
				return h, false
			}
			if i := relayedIndex(k); i >= 0 {
				h.Headers[i] = internHeadString(v)
			}
		}
	}
	return h, p.end()
}

// maxFastHeadFields bounds the headers parseResponseHeadFast reads:
// twice the relayed ones, for a peer that sends a few more (they are
// dropped).
const maxFastHeadFields = 2 * len(relayedResponseHeaders)
