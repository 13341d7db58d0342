package meshproxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/proxy"
)

// The KindInfer stream, after the kind byte, carries mesh frames
// (mesh.WriteFrame) of these types. The consumer sends one request head,
// its body in chunks of at most MeshChunkBytes, and an end frame, then
// closes its write side; a body is sent as the consumer's client uploads
// it, and the serving node forwards it to its instance as it arrives
// (bodies of at most proxy.MeshBufferedBodyBytes are held whole on both sides).
// The serving node answers either one refusal, or one response head, body
// chunks and an end frame; a refusal after the head means the response
// failed midway (the consumer cuts its client's stream). Frames that
// follow one another without a wait (a request with its small body, a
// response head with its first chunk) are written at once, so that they
// leave in one packet. Values are part of the wire protocol; never reuse
// one.
const (
	frameReqHead  mesh.FrameType = 0x01 // meshRequestHead JSON
	frameReqBody  mesh.FrameType = 0x02 // raw request body bytes
	frameReqEnd   mesh.FrameType = 0x03 // empty: the request is complete
	frameRespHead mesh.FrameType = 0x11 // meshResponseHead JSON
	frameRespBody mesh.FrameType = 0x12 // raw response body bytes
	frameRespEnd  mesh.FrameType = 0x13 // empty: the response is complete
	frameRefusal  mesh.FrameType = 0x14 // meshRefusal JSON; nothing follows
)

// Refusal codes a serving node sends to a peer. They are stable on the
// wire; the message next to them is generic and never carries addresses,
// ports or upstream text.
const (
	RefuseNotServed       = "not_served"           // role not exposed, peer not on serve_to, or no local instance
	RefuseBadRequest      = "bad_request"          // malformed head or body, wrong frame order
	RefuseForbiddenPath   = "forbidden_path"       // path not among the mesh inference paths
	RefuseTooLarge        = "too_large"            // body over the serving node's mesh body limit
	RefuseOverCapacity    = "over_capacity"        // per-peer or total serving slots taken
	RefuseUpstreamDown    = "upstream_unavailable" // the local instance could not be reached
	RefuseUpstreamError   = "upstream_error"       // the local instance failed or answered badly
	RefuseUpstreamTimeout = "upstream_timeout"     // the local instance took too long
)

// relayedResponseHeaders are the upstream response headers carried back
// to the consumer; anything else (Set-Cookie, Server, ...) stays home.
// Content-Length, when the instance sent one, lets the consumer answer its
// client with it too (one write, no chunked encoding); a consumer that
// does not know it drops it. A decoded head holds their values at their
// indexes here (relayedHeaders).
var relayedResponseHeaders = [...]string{
	hdrContentType:   "Content-Type",
	hdrCacheControl:  "Cache-Control",
	hdrContentLength: "Content-Length",
}

// The indexes of relayedResponseHeaders.
const (
	hdrContentType = iota
	hdrCacheControl
	hdrContentLength
)

// relayedIndex returns the index of name in relayedResponseHeaders, or -1.
func relayedIndex(name []byte) int {
	for i, n := range relayedResponseHeaders {
		if string(name) == n { // compiled without a conversion
			return i
		}
	}
	return -1
}

// meshRequestHead is the first frame of a KindInfer stream. There is
// deliberately no field for Authorization or cookies: a client's
// credentials never cross the mesh.
type meshRequestHead struct {
	V           int    `json:"v"`
	Role        string `json:"role"`
	Method      string `json:"method"`
	Path        string `json:"path"`
	Query       string `json:"query,omitempty"`
	ContentType string `json:"content_type,omitempty"`
	Accept      string `json:"accept,omitempty"`
	// BodyBytes is the exact length of the body frames that follow, or
	// -1 when the consumer's client did not say (a chunked upload): the
	// end frame then ends the body, bounded by the serving node's mesh
	// body limit.
	BodyBytes int64 `json:"body_bytes"`
}

// meshResponseHead is the serving node's response head as encoding/json
// reads and writes it. The serving node writes it by hand
// (appendResponseHeadFrame); the consumer reads it into a responseHead
// (decodeResponseHead).
type meshResponseHead struct {
	V       int               `json:"v"`
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers,omitempty"`
}

// responseHead is a response head as the consumer reads it: only the
// relayed headers, in an array, not a map (a map, iterated to filter it
// and again to copy it into the client's answer, cost a few percent of
// the consumer's CPU).
type responseHead struct {
	V       int
	Status  int
	Headers relayedHeaders
}

// relayedHeaders holds the value of each of relayedResponseHeaders at its
// index, "" for a header the head does not carry.
type relayedHeaders [len(relayedResponseHeaders)]string

// meshRefusal ends a KindInfer exchange from the serving side.
type meshRefusal struct {
	V       int    `json:"v"`
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

// wireError is a decoding or protocol failure with the refusal code a
// serving node answers it with.
type wireError struct {
	code string
	msg  string
}

func (e *wireError) Error() string { return e.code + ": " + e.msg }

func badRequest(format string, args ...any) error {
	return &wireError{code: RefuseBadRequest, msg: fmt.Sprintf(format, args...)}
}

// decodeStrict decodes exactly one JSON object into v, refusing unknown
// fields and trailing data.
func decodeStrict(b []byte, v any) error {
	if len(b) > MaxMeshHeadBytes {
		return fmt.Errorf("%d bytes over the head bound %d", len(b), MaxMeshHeadBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// decodeRequestHead decodes and validates a request head as if it came
// from an untrusted client. Errors are *wireError. role, when not "", is
// the string the head's role is given when it names that role
// (parseRequestHeadFast).
func decodeRequestHead(b []byte, role string) (meshRequestHead, error) {
	h, ok := parseRequestHeadFast(b, role)
	if !ok || len(b) > MaxMeshHeadBytes {
		// A head of its own for encoding/json, which takes its address:
		// h, so taken, would be moved to the heap on every call.
		var j meshRequestHead
		if err := decodeStrict(b, &j); err != nil {
			return meshRequestHead{}, badRequest("request head: %v", err)
		}
		h = j
	}
	switch {
	case h.V != MeshWireVersion:
		return meshRequestHead{}, badRequest("request head version %d", h.V)
	case !grammar.ValidName(h.Role):
		return meshRequestHead{}, badRequest("bad role")
	case h.Method != http.MethodGet && h.Method != http.MethodPost:
		return meshRequestHead{}, badRequest("method not allowed")
	case !proxy.IsMeshPath(h.Path):
		return meshRequestHead{}, &wireError{code: RefuseForbiddenPath, msg: "path is not served to peers"}
	case !validQuery(h.Query):
		return meshRequestHead{}, badRequest("bad query")
	case h.ContentType != "" && !validHeaderValue(h.ContentType),
		h.Accept != "" && !validHeaderValue(h.Accept):
		return meshRequestHead{}, badRequest("bad header value")
	case h.BodyBytes < -1:
		return meshRequestHead{}, badRequest("negative body length")
	}
	return h, nil
}

// decodeResponseHead decodes a serving node's response head. Headers not
// relayed, or with unsafe values, are dropped; an interim or out of range
// status is an error (a forged 1xx must not pass as the final answer).
func decodeResponseHead(b []byte) (responseHead, error) {
	h, ok := parseResponseHeadFast(b)
	if !ok || len(b) > MaxMeshHeadBytes {
		var j meshResponseHead // not h's address: see decodeRequestHead
		if err := decodeStrict(b, &j); err != nil {
			return responseHead{}, fmt.Errorf("response head: %w", err)
		}
		h = responseHead{V: j.V, Status: j.Status}
		for i, name := range relayedResponseHeaders {
			h.Headers[i] = j.Headers[name] // the others are dropped
		}
	}
	if h.V != MeshWireVersion {
		return responseHead{}, fmt.Errorf("response head version %d", h.V)
	}
	if h.Status < 200 || h.Status > 599 {
		return responseHead{}, fmt.Errorf("response status %d", h.Status)
	}
	for i, v := range h.Headers {
		if v != "" && (!validHeaderValue(v) || (i == hdrContentLength && !validContentLength(v))) {
			h.Headers[i] = ""
		}
	}
	return h, nil
}

// decodeRefusal decodes a refusal. A code outside the known set is kept as
// "" (the consumer answers it generically); the message is not trusted
// and is not decoded beyond its bound.
func decodeRefusal(b []byte) (meshRefusal, error) {
	var r meshRefusal
	if err := decodeStrict(b, &r); err != nil {
		return meshRefusal{}, fmt.Errorf("refusal: %w", err)
	}
	if r.V != MeshWireVersion {
		return meshRefusal{}, fmt.Errorf("refusal version %d", r.V)
	}
	if len(r.Message) > MaxMeshRefusalMessageBytes {
		return meshRefusal{}, errors.New("refusal message over its bound")
	}
	if _, ok := refusalStatus[r.Code]; !ok {
		r.Code = ""
	}
	return r, nil
}

// validHeaderValue accepts a non-empty, bounded header value of visible
// ASCII, spaces and tabs (no CR, LF or other controls).
func validHeaderValue(v string) bool {
	if v == "" || len(v) > MaxMeshHeaderValueBytes {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c >= 0x7f {
			return false
		}
	}
	return true
}

// validContentLength accepts a decimal length of at most 18 digits.
func validContentLength(v string) bool {
	if v == "" || len(v) > 18 {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return false
		}
	}
	return true
}

// validQuery accepts a bounded query of visible ASCII without '#'.
func validQuery(q string) bool {
	if len(q) > proxy.MaxPathBytes {
		return false
	}
	for i := 0; i < len(q); i++ {
		if c := q[i]; c <= 0x20 || c >= 0x7f || c == '#' {
			return false
		}
	}
	return true
}

// writeJSONFrame marshals v and writes it as one frame.
func writeJSONFrame(w io.Writer, t mesh.FrameType, v any) error {
	b, err := appendJSONFrame(nil, t, v)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// appendJSONFrame appends v, marshalled, as one frame to dst.
func appendJSONFrame(dst []byte, t mesh.FrameType, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return dst, fmt.Errorf("encode frame %#x: %w", byte(t), err)
	}
	if len(b) > MaxMeshHeadBytes {
		return dst, fmt.Errorf("encode frame %#x: %d bytes over the head bound %d", byte(t), len(b), MaxMeshHeadBytes)
	}
	return append(mesh.AppendFrameHeader(dst, t, len(b)), b...), nil
}

// appendBodyFrames appends body as frames of type t of at most
// MeshChunkBytes to dst.
func appendBodyFrames(dst []byte, t mesh.FrameType, body []byte) []byte {
	for len(body) > 0 {
		n := min(len(body), MeshChunkBytes)
		dst = append(mesh.AppendFrameHeader(dst, t, n), body[:n]...)
		body = body[n:]
	}
	return dst
}

// readRequestHead reads the first frame of a KindInfer stream: it must be
// a valid request head. A head that does not decode or validate is a
// *wireError (answered with a refusal); broken framing wraps
// errMalformedFrames or a mesh.ReadFrame error (answered with a reset).
func readRequestHead(r io.Reader) (meshRequestHead, error) {
	ts, onConn := r.(*tcpServerStream)
	var t mesh.FrameType
	var p []byte
	var err error
	if onConn {
		t, p, err = mesh.ReadFrameBuffered(ts, MaxMeshHeadBytes, ts.cs.hdr[:], ts.cs.head[:])
	} else {
		t, p, err = mesh.ReadFrame(r, MaxMeshHeadBytes)
	}
	if err != nil {
		return meshRequestHead{}, err
	}
	if t != frameReqHead {
		return meshRequestHead{}, fmt.Errorf("%w: first frame type %#x", errMalformedFrames, byte(t))
	}
	if !onConn {
		return decodeRequestHead(p, "")
	}
	h, err := decodeRequestHead(p, ts.cs.role)
	if err == nil {
		ts.cs.role = h.Role // the next head names it too, most often
	}
	return h, err
}

// readRequestBody reads the body frames announced by h and the end frame
// into memory. h.BodyBytes must already be checked against what may be
// held: it is allocated at once. A body of unknown length (-1) is read up
// to limit. With arm set (r itself, most often), its read deadline is
// set MeshFrameTimeout ahead before each frame is read (meshBodyReader).
func readRequestBody(r io.Reader, h meshRequestHead, limit int64, arm deadliner) ([]byte, error) {
	var b *meshBodyReader
	if ts, ok := r.(*tcpServerStream); ok {
		// The connection's own: nothing keeps it past the read (its
		// errors are values of their own).
		b = &ts.cs.body
		*b = meshBodyReader{r: r, arm: arm, announced: h.BodyBytes, limit: limit}
	} else {
		b = &meshBodyReader{r: r, arm: arm, announced: h.BodyBytes, limit: limit}
	}
	if h.BodyBytes < 0 {
		return io.ReadAll(b)
	}
	body := make([]byte, h.BodyBytes)
	if _, err := io.ReadFull(b, body); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			// The end frame came early: meshBodyReader says why.
			err = b.err
		}
		return nil, err
	}
	if n, err := b.Read(b.one[:]); n != 0 || err != io.EOF {
		if err == nil {
			err = fmt.Errorf("%w: body longer than announced", errMalformedFrames)
		}
		return nil, err
	}
	return body, nil
}

// deadliner is what has a read deadline (meshBodyReader.arm).
type deadliner interface{ SetReadDeadline(time.Time) error }

// errNoEndFrame is the stream ending where a body frame or the end frame
// was due; it wraps io.EOF.
var errNoEndFrame = fmt.Errorf("request ended before its end frame: %w", io.EOF)

// meshBodyReader is the body of a KindInfer request: the payloads of its
// body frames, read from the stream as the caller reads (one frame's
// payload goes straight into the caller's buffer), until the end frame,
// where Read returns io.EOF. A body longer or shorter than announced, a
// frame of another type, or a frame over MeshChunkBytes is an error
// (errMalformedFrames, mesh.ErrFrameTooLarge), and so is the stream ending
// before the end frame (errNoEndFrame, mesh.ErrTruncatedFrame); a body of
// unknown length over limit is a too_large *wireError. Errors are sticky.
// Read is used by one goroutine at a time.
type meshBodyReader struct {
	r io.Reader
	// arm, when set (the stream r reads), has its read deadline set
	// MeshFrameTimeout ahead before each frame header is read: an
	// interface, where a function would be a closure made each request.
	arm       deadliner
	announced int64 // -1: unknown
	limit     int64 // bound of a body of unknown length
	got       int64
	left      int // payload bytes of the current body frame not read yet
	err       error
	hdr       [mesh.FrameHeaderSize]byte // a frame header, read in place
	one       [1]byte                    // readRequestBody's read past the body (a local escapes)
}

func (b *meshBodyReader) Read(p []byte) (int, error) {
	for b.left == 0 {
		if b.err != nil {
			return 0, b.err
		}
		if b.arm != nil {
			_ = b.arm.SetReadDeadline(time.Now().Add(MeshFrameTimeout))
		}
		t, n, err := mesh.ReadFrameHeaderInto(b.r, MeshChunkBytes, b.hdr[:])
		switch {
		case err == io.EOF:
			b.err = errNoEndFrame
		case err != nil:
			b.err = err
		case t == frameReqBody && b.announced >= 0 && b.got+int64(n) > b.announced:
			b.err = fmt.Errorf("%w: body longer than announced", errMalformedFrames)
		case t == frameReqBody && b.announced < 0 && b.got+int64(n) > b.limit:
			b.err = &wireError{code: RefuseTooLarge, msg: "body over the mesh body limit"}
		case t == frameReqBody:
			b.left = n
		case t == frameReqEnd && (n != 0 || (b.announced >= 0 && b.got != b.announced)):
			b.err = fmt.Errorf("%w: body of %d bytes, announced %d", errMalformedFrames, b.got, b.announced)
		case t == frameReqEnd:
			b.err = io.EOF
			if e, ok := b.r.(requestEnder); ok {
				e.requestRead()
			}
		default:
			b.err = fmt.Errorf("%w: unexpected frame %#x in request", errMalformedFrames, byte(t))
		}
	}
	if len(p) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= n
	b.got += int64(n)
	if err != nil && b.left > 0 {
		if err == io.EOF {
			err = mesh.ErrTruncatedFrame
		}
		b.err = err
		return n, err
	}
	return n, nil
}

// peerRefusal is a refusal received from the serving node.
type peerRefusal struct {
	code      string
	afterHead bool
}

func (e *peerRefusal) Error() string {
	if e.code == "" {
		return "peer refused the request"
	}
	return "peer refused the request: " + e.code
}

// errMalformedFrames marks frames that break the KindInfer protocol
// (order, type, length); the reader resets the stream with
// mesh.StreamCodeMalformed.
var errMalformedFrames = errors.New("malformed KindInfer frames")

// relayResponse reads the serving node's frames from r and relays them to
// w: head, then every body chunk as it arrives (w flushes each write),
// until the end frame. A response whose length the instance gave carries
// that Content-Length, so that net/http writes a small answer in one
// write, without chunked encoding. It is the consumer's state machine: a body or end frame
// before the head, a second head, a chunk over MeshChunkBytes, an unknown
// frame type or data after a refusal are errMalformedFrames. A refusal
// returns *peerRefusal. fb (nil: a large one is made) holds one frame: a
// large buffer is swapped for a small one once an event stream's head is
// relayed, a small one for a large one when a frame needs more
// (readFrameGrow).
func relayResponse(r io.Reader, w http.ResponseWriter, fb *frameBuf) error {
	const bound = max(MeshChunkBytes, MaxMeshHeadBytes)
	if fb == nil {
		own := (*framePools)(nil).largeBuf()
		fb = &own
	}
	headSeen := false
	// held: head is a response head not yet written to w: a response that is
	// not a stream is committed with its first body byte (or its end), so
	// a link that dies between the head and the body leaves nothing
	// written and the request can still go to another peer. A stream's
	// head is written at once: its client may wait long for the first
	// token, and should know the request was taken.
	var head responseHead
	held := false
	commit := func(h *responseHead) {
		// One backing array for every value (each header its own
		// one-element, full-capacity slice of it), not one per header.
		// The names are canonical already (relayedResponseHeaders).
		hdr := w.Header()
		n := 1
		for _, v := range h.Headers {
			if v != "" {
				n++
			}
		}
		vals := make([]string, 0, n)
		set := func(name, v string) {
			vals = append(vals, v)
			hdr[name] = vals[len(vals)-1 : len(vals) : len(vals)]
		}
		for i, v := range h.Headers {
			if v != "" {
				set(relayedResponseHeaders[i], v)
			}
		}
		set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(h.Status)
	}
	for {
		t, p, err := readFrameGrow(r, fb, bound)
		if err != nil {
			if errors.Is(err, mesh.ErrFrameTooLarge) {
				return fmt.Errorf("%w: %w", errMalformedFrames, err)
			}
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("%w: stream ended before the end frame", errMalformedFrames)
			}
			return err
		}
		switch t {
		case frameRespHead:
			if headSeen {
				return fmt.Errorf("%w: second response head", errMalformedFrames)
			}
			if head, err = decodeResponseHead(p); err != nil {
				return fmt.Errorf("%w: %w", errMalformedFrames, err)
			}
			headSeen = true
			if isStreamType(head.Headers[hdrContentType]) {
				commit(&head)
				fb.shrink() // its events are small, and it may stay open long
			} else {
				held = true
			}
		case frameRespBody:
			if !headSeen {
				return fmt.Errorf("%w: body before head", errMalformedFrames)
			}
			if len(p) > MeshChunkBytes {
				return fmt.Errorf("%w: body chunk of %d bytes", errMalformedFrames, len(p))
			}
			if held {
				commit(&head)
				held = false
			}
			if _, err := w.Write(p); err != nil {
				return fmt.Errorf("relay to client: %w", err)
			}
		case frameRespEnd:
			if !headSeen {
				return fmt.Errorf("%w: end before head", errMalformedFrames)
			}
			if cs, ok := r.(*tcpClientStream); ok && len(p) == 1 && p[0] <= connKept {
				// On a connection: whether it serves another exchange.
				cs.kept = p[0] == connKept
			} else if len(p) != 0 {
				return fmt.Errorf("%w: end frame with data", errMalformedFrames)
			}
			if held {
				commit(&head)
			}
			return nil
		case frameRefusal:
			ref, err := decodeRefusal(p)
			if err != nil {
				return fmt.Errorf("%w: %w", errMalformedFrames, err)
			}
			return &peerRefusal{code: ref.Code, afterHead: headSeen}
		default:
			return fmt.Errorf("%w: unexpected frame %#x", errMalformedFrames, byte(t))
		}
	}
}

// isStreamType reports whether a response Content-Type is a stream whose
// head is relayed before its body: server-sent events (OpenAI streaming)
// or newline-delimited JSON (Ollama streaming).
func isStreamType(contentType string) bool {
	switch contentType { // the common ones, without the cut and the folding
	case "application/json", "application/json; charset=utf-8":
		return false
	case "text/event-stream", "application/x-ndjson":
		return true
	}
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	return mt == "text/event-stream" || mt == "application/x-ndjson"
}
