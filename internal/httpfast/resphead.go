package httpfast

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
)

// parseResponseHead reads the common response head from what br already
// holds, without a read and with few allocations: HTTP/1.1, a final
// status other than 204 and 304, header lines that net/http accepts as
// they are, and a body framed by one Content-Length. It returns nil, and
// consumes nothing, for anything else (a head not whole in the buffer
// yet, 1xx, chunked or close-delimited bodies, folded lines, Pragma or
// Trailer headers, a HEAD request): http.ReadResponse reads those. What
// it returns is what http.ReadResponse returns for the same bytes
// (FuzzResponseHead checks it). With a non-nil slot the response, its
// body and its header map are slot's, reused: they must be done with
// before the next call with slot, and with slot.headerDone so must the
// value slices of the header.
func parseResponseHead(br *bufio.Reader, req *http.Request, slot *responseSlot) *http.Response {
	if req != nil && req.Method == http.MethodHead {
		return nil
	}
	buf, _ := br.Peek(br.Buffered())
	end, lines, bare := scanHead(buf)
	if end < 0 || bare {
		return nil
	}
	raw := buf[:end+2] // the lines, each ending in CRLF
	line, rest := cutLine(raw)
	// "HTTP/1.1 200 OK": the status is three digits, then a space and a
	// reason or nothing.
	if len(line) < 12 || string(line[:9]) != "HTTP/1.1 " || (len(line) > 12 && line[12] != ' ') {
		return nil
	}
	code := 0
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return nil
		}
		code = code*10 + int(c-'0')
	}
	if code < 200 || code == http.StatusNoContent || code == http.StatusNotModified {
		return nil
	}
	if len(rest) > 0 && (rest[0] == ' ' || rest[0] == '\t') {
		return nil // a folded first line
	}
	// One string holds every value; the names are constants or
	// canonicalized copies.
	text := string(raw)
	var h http.Header
	if slot != nil && slot.header != nil {
		h = slot.header
		clear(h)
	} else {
		h = make(http.Header, lines)
	}
	var strs []string
	if slot != nil && slot.headerDone && lines <= maxReusedHeaders {
		if cap(slot.strs) < lines {
			slot.strs = make([]string, max(lines, 8))
		}
		strs = slot.strs[:lines]
		clear(strs)
	} else {
		strs = make([]string, lines)
	}
	length := int64(-1)
	closing := false
	var fields fieldSet
	off := len(line) + 2
	for len(rest) > 0 {
		l, next := cutLine(rest)
		start := off
		off += len(l) + 2
		rest = next
		if len(l) > 0 && (l[0] == ' ' || l[0] == '\t') {
			return nil // obs-fold
		}
		colon := bytes.IndexByte(l, ':')
		if colon <= 0 || !validFieldName(l[:colon]) {
			return nil
		}
		v := l[colon+1:]
		if !validFieldValue(v) {
			return nil
		}
		vs, ve := trimOWS(v)
		value := text[start+colon+1+vs : start+colon+1+ve]
		hn := fields.name(knownResponseHeaders, text[start:start+colon], l[:colon])
		name := hn.name
		switch name {
		case "Content-Length":
			if length >= 0 {
				return nil // net/http's rules for repeats
			}
			n, ok := parseDigits(value)
			if !ok {
				return nil
			}
			length = n
		case "Transfer-Encoding", "Trailer", "Pragma":
			return nil
		case "Connection":
			if hasTokenASCII(value, "close") {
				closing = true
			}
		}
		strs = fields.add(h, strs, hn, value)
	}
	if length < 0 {
		return nil
	}
	if closing {
		delete(h, "Connection") // as net/http does
	}
	status := text[9:len(line)]
	var res *http.Response
	var body *lengthBody
	if slot != nil {
		slot.header = h
		res, body = &slot.res, &slot.body
	} else {
		res, body = new(http.Response), new(lengthBody)
	}
	*res = http.Response{
		Status: status, StatusCode: code, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, ContentLength: length, Close: closing, Request: req,
	}
	if length == 0 {
		res.Body = http.NoBody
	} else {
		*body = lengthBody{r: br, left: length}
		res.Body = body
	}
	_, _ = br.Discard(end + 4)
	return res
}

// responseSlot holds a response parseResponseHead may reuse: an
// upstream connection's, for one exchange at a time.
type responseSlot struct {
	res    http.Response
	body   lengthBody
	header http.Header
	// strs backs the header's values when the exchange's caller is done
	// with them before the next (headerDone: Request.HeaderDone); else
	// they are the response's own, as a caller that copies the value
	// slices into its client's header (the local path) needs.
	strs       []string
	headerDone bool
}

// knownResponseHeaders maps the header names an instance usually sends,
// as sent, to their canonical form, so that they cost no allocation.
var knownResponseHeaders = knownNames("Content-Type", "Content-Length", "Date", "Server", "Connection",
	"Keep-Alive", "Cache-Control", "Vary", "Access-Control-Allow-Origin", "Access-Control-Allow-Credentials",
	"Access-Control-Allow-Headers", "Access-Control-Allow-Methods", "Access-Control-Expose-Headers",
	"X-Request-Id", "Etag", "Last-Modified", "Expires", "Content-Encoding", "Transfer-Encoding",
	"Trailer", "Pragma", "X-Content-Type-Options")

// headerName is a field name of a head in canonical form; a known one
// (knownNames) has a bit of its own.
type headerName struct {
	name string
	bit  uint64
}

// knownNames maps canonical header names, and their lower-case forms,
// to themselves with a bit each (at most 64 names).
func knownNames(names ...string) map[string]headerName {
	if len(names) > 64 {
		panic("httpfast: more than 64 known header names")
	}
	m := make(map[string]headerName, 2*len(names))
	for i, k := range names {
		m[k] = headerName{name: k, bit: 1 << i}
		m[strings.ToLower(k)] = headerName{name: k, bit: 1 << i}
	}
	return m
}

// fieldSet adds one head's fields to its header map, empty at first. It
// knows which known names the map has been given (their bits), so that
// a known name's first value is one map assignment, not a lookup and
// then one.
type fieldSet struct {
	seen uint64 // the bits of the known names given
	// copied is set once a name was canonicalized into a copy: that
	// name may be a known one without its bit (as "CONTENT-TYPE").
	copied bool
}

// name returns the canonical form of b, a field name (a token) that
// is the text s of the head's string: a known name, else s itself when
// it is canonical already, else a canonicalized copy.
func (f *fieldSet) name(known map[string]headerName, s string, b []byte) headerName {
	if hn, ok := known[string(b)]; ok {
		return hn
	}
	if isCanonical(b) {
		return headerName{name: s}
	}
	f.copied = true
	return headerName{name: http.CanonicalHeaderKey(s)}
}

// add adds value to h[hn.name] as addHeaderValue does.
func (f *fieldSet) add(h http.Header, strs []string, hn headerName, value string) []string {
	if hn.bit == 0 || f.copied || f.seen&hn.bit != 0 || len(strs) == 0 {
		return addHeaderValue(h, strs, hn.name, value)
	}
	f.seen |= hn.bit
	vv := strs[:1:1]
	vv[0] = value
	h[hn.name] = vv
	return strs[1:]
}

// isCanonical reports whether the token b is in canonical form, as
// http.CanonicalHeaderKey returns it: its first letter and each after a
// hyphen upper case, the others lower case.
func isCanonical(b []byte) bool {
	upper := true
	for _, c := range b {
		switch {
		case upper && 'a' <= c && c <= 'z', !upper && 'A' <= c && c <= 'Z':
			return false
		}
		upper = c == '-'
	}
	return true
}

// cutLine returns the first line of b, a head's lines as scanHead found
// them (each ending in CRLF, no bare line feed), without its CRLF, and
// the lines after it: its line feed is the first, one byte search where
// looking for the CRLF takes a search and a comparison.
func cutLine(b []byte) (line, rest []byte) {
	i := bytes.IndexByte(b, '\n')
	if i < 1 {
		return b, nil // not a head's lines; scanHead makes it unreachable
	}
	return b[:i-1], b[i+1:]
}

// trimOWS returns the bounds of v without leading and trailing spaces
// and tabs.
func trimOWS[T string | []byte](v T) (int, int) {
	s, e := 0, len(v)
	for s < e && (v[s] == ' ' || v[s] == '\t') {
		s++
	}
	for e > s && (v[e-1] == ' ' || v[e-1] == '\t') {
		e--
	}
	return s, e
}

// parseDigits parses a non-empty decimal without sign that fits an int64.
func parseDigits(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// hasTokenASCII reports whether the comma-separated list v has token,
// compared ASCII case-insensitively (net/http's httpguts rule).
func hasTokenASCII(v, token string) bool {
	for len(v) > 0 {
		f, after, _ := strings.Cut(v, ",")
		v = after
		b, e := trimOWS(f)
		if asciiEqualFold(f[b:e], token) {
			return true
		}
	}
	return false
}

func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// lengthBody is a response body of a known length read from an
// instance's connection.
type lengthBody struct {
	r    *bufio.Reader
	left int64
}

func (b *lengthBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	if b.left == 0 {
		return n, io.EOF
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *lengthBody) Close() error { return nil }

// addHeaderValue adds value to h[name] (name already canonical): a name's
// first value takes a one-element slice cut from strs, a block the caller
// allocated for the whole head, so a head of n fields costs one allocation
// rather than n; later values append. It returns what is left of strs.
func addHeaderValue(h http.Header, strs []string, name, value string) []string {
	if vv := h[name]; vv == nil && len(strs) > 0 {
		vv, strs = strs[:1:1], strs[1:]
		vv[0] = value
		h[name] = vv
	} else {
		h[name] = append(vv, value)
	}
	return strs
}
