package operator

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/pkg"
)

// Operator verbs.
const (
	VerbDescribe = "describe"
	VerbPlace    = "place"
	VerbStart    = "start"
	VerbStop     = "stop"
	VerbUnload   = "unload"
	VerbStatus   = "status"
	VerbLogs     = "logs"
	// VerbRevoke and VerbUnrevoke edit this node's revocation list (node
	// "self" only); the workload host tears down what a revocation hits.
	VerbRevoke   = "revoke"
	VerbUnrevoke = "unrevoke"
)

// Operator response classes.
const (
	ClassOK            = "ok"
	ClassRefused       = "refused"
	ClassUnreachable   = "unreachable"
	ClassIndeterminate = "indeterminate"
	ClassError         = "error"
)

// Codes of operator responses with ClassError.
const (
	CodeBadRequest = "bad_request"
	CodeTooLarge   = "too_large"
	CodeBusy       = "busy"
	CodeBadPackage = "bad_package"
	CodeInternal   = "internal"
	// CodeForbidden: the peer is a process of a placed instance
	// (Deps.RefusePeer), which must never drive its node.
	CodeForbidden = "forbidden"
)

// Args are a verb's arguments.
type Args struct {
	// Instance names the instance (start, stop, unload, logs; optional for
	// status).
	Instance string `json:"instance,omitempty"`
	// PackageDir is the absolute package directory (place), read by the
	// daemon.
	PackageDir string `json:"package_dir,omitempty"`
	// Variant is the manifest variant (place); empty means the package's
	// first.
	Variant string `json:"variant,omitempty"`
	// NoStart loads without starting (place).
	NoStart bool `json:"no_start,omitempty"`
	// GraceMS is stop's grace in milliseconds; 0 means the host's default.
	GraceMS int64 `json:"grace_ms,omitempty"`
	// Subject is what revoke and unrevoke name: kind (package, signer or
	// artifact) and value; Reason is kept with a revocation.
	Subject *pkg.Subject `json:"subject,omitempty"`
	// Departed lists departed instances too (status without an instance).
	Departed bool `json:"departed,omitempty"`
	// Notify makes revoke and unrevoke a notice signed with this node's
	// key, applied here and gossiped to the mesh, instead of a local edit.
	Notify bool `json:"notify,omitempty"`

	// The arguments below are a controller's (served by Router with a
	// Controller); the dispatcher ignores them.

	// Package is a package id (place through a controller's package
	// store) instead of PackageDir: "ID" for the newest version, or
	// "ID@VERSION".
	Package string `json:"package,omitempty"`
	// Prefer and Avoid are nodes the controller's engine prefers or
	// avoids (place without a node).
	Prefer []string `json:"prefer,omitempty"`
	Avoid  []string `json:"avoid,omitempty"`
	// DryRun decides and explains, and dispatches nothing (place).
	DryRun bool `json:"dry_run,omitempty"`
	// AllowEmulated lets the controller's engine choose an emulated
	// variant when no node fits a native one (place).
	AllowEmulated bool `json:"allow_emulated,omitempty"`
	// DecisionID names the decision to explain.
	DecisionID string `json:"decision_id,omitempty"`
}

// Request is one request on the operator socket: one JSON line.
type Request struct {
	Verb string `json:"verb"`
	Node string `json:"node"`
	Args Args   `json:"args"`
	// JSON says the client will print the raw result; the server answers
	// the same either way.
	JSON bool `json:"json,omitempty"`
}

// Response is the answer: one JSON line.
type Response struct {
	OK bool `json:"ok"`
	// Class is ok, refused, unreachable, indeterminate or error.
	Class string `json:"class"`
	// Code is the refusal code (refused) or an operator error code.
	Code   string `json:"code,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Node is the node id that answered (ok, refused).
	Node string `json:"node,omitempty"`
	// DecisionID is the decision a mutating call carried.
	DecisionID string `json:"decision_id,omitempty"`
	// Result is the verified ctl result (ok).
	Result json.RawMessage `json:"result,omitempty"`
	// ForwardedTo is the node id of the leader that a follower controller
	// forwarded the request to (the rest of the answer is the leader's);
	// "" when the node on the socket served it.
	ForwardedTo string `json:"forwarded_to,omitempty"`
}

// ErrDaemonNotRunning is wrapped by Dial when nothing listens on
// the socket.
var ErrDaemonNotRunning = errors.New("no nodeld answers on the operator socket (is nodeld running?)")

// ErrSocketInUse is returned by Server.Run when another process
// answers on the socket path.
var ErrSocketInUse = errors.New("operator socket is in use by another process")

// Config configures the operator socket.
type Config struct {
	// Path is the unix socket path (config.Config.SocketPath()).
	Path string
	// Group, when set (a name or a numeric gid), owns the socket, which is
	// then mode 0660; otherwise it is mode 0600.
	Group string
}

// Backend serves the verbs of the operator socket: the server
// reads and bounds one request, hands it to Operate, and writes the
// answer, so the wire format and its bounds stay the server's. The
// dispatcher (*dispatch.Dispatcher) is the backend of the per-node verbs
// (VerbDescribe ... VerbUnrevoke). Router adds a controller's verbs (a
// place that picks the node, explain, placements, workloads, nodes) and
// hands every other request to the dispatcher; the server needs no
// change for it.
type Backend interface {
	// Verbs lists the verbs Operate serves. The server counts requests by
	// verb for these and as "unknown" for any other, so it is a small
	// fixed set.
	Verbs() []string
	// Operate runs one request and classifies its outcome. It answers
	// every request: an unknown verb or bad arguments with ClassError and
	// CodeBadRequest.
	Operate(ctx context.Context, req Request) Response
}

// Deps are the operator server's collaborators.
type Deps struct {
	// Backend serves the verbs; required.
	Backend Backend
	// Logger; nil logs nothing.
	Logger *zap.Logger
	// Registerer receives nodeld_dispatch_operator_requests_total; nil
	// registers none.
	Registerer prometheus.Registerer
	// RefusePeer, when set, is asked about every connection's peer
	// process (its pid and uid, from the kernel: SO_PEERCRED) before its
	// request is read; true refuses it with CodeForbidden. nodeld refuses
	// the processes of placed instances. A peer whose credentials cannot
	// be read is refused too.
	RefusePeer func(pid int, uid uint32) bool
}

// Server serves operator requests on a unix socket, never TCP.
type Server struct {
	cfg     Config
	backend Backend
	// refusePeer is Deps.RefusePeer.
	refusePeer func(pid int, uid uint32) bool
	// verbs are the backend's verbs, the metric's label values.
	verbs    map[string]bool
	log      *zap.Logger
	requests *prometheus.CounterVec

	ready chan struct{}
	// slots bounds the connections served at once.
	slots chan struct{}
}

// NewServer validates cfg and deps and registers the server's
// metric; it binds nothing.
func NewServer(cfg Config, deps Deps) (*Server, error) {
	if deps.Backend == nil {
		return nil, errors.New("operator socket: no backend")
	}
	if cfg.Path == "" || !filepath.IsAbs(cfg.Path) && !filepath.IsLocal(cfg.Path) {
		return nil, fmt.Errorf("operator socket: bad path %q", cfg.Path)
	}
	o := &Server{cfg: cfg, backend: deps.Backend, refusePeer: deps.RefusePeer, verbs: make(map[string]bool), log: deps.Logger,
		ready: make(chan struct{}), slots: make(chan struct{}, MaxOperatorConns)}
	for _, v := range deps.Backend.Verbs() {
		o.verbs[v] = true
	}
	if o.log == nil {
		o.log = zap.NewNop()
	}
	var err error
	if o.requests, err = newMetrics(deps.Registerer); err != nil {
		return nil, fmt.Errorf("operator socket: %w", err)
	}
	return o, nil
}

// Ready is closed once the socket is listening.
func (o *Server) Ready() <-chan struct{} { return o.ready }

// Run binds the socket, serves connections until ctx is done, then closes
// the listener, cancels requests in progress, waits for every connection
// goroutine and removes the socket file.
func (o *Server) Run(ctx context.Context) error {
	ln, err := o.listen()
	if err != nil {
		return err
	}
	close(o.ready)
	o.log.Info("operator socket listening", zap.String("path", o.cfg.Path))

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		_ = ln.Close()
		wg.Wait()
		_ = os.Remove(o.cfg.Path)
	}()
	wg.Go(func() {
		<-ctx.Done()
		_ = ln.Close()
	})
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("operator socket accept: %w", err)
		}
		select {
		case o.slots <- struct{}{}:
		default:
			wg.Go(func() {
				defer conn.Close()
				_ = conn.SetWriteDeadline(time.Now().Add(OperatorWriteTimeout))
				writeResponse(conn, Response{Class: ClassError, Code: CodeBusy, Reason: "too many operator requests in progress"})
			})
			continue
		}
		wg.Go(func() {
			defer func() { <-o.slots }()
			o.serveConn(ctx, conn)
		})
	}
}

// listen binds the socket under a temporary name, sets its mode and group,
// and renames it into place, so it is never reachable with a looser mode.
// A stale socket file is removed only if nothing answers on it.
func (o *Server) listen() (*net.UnixListener, error) {
	path := o.cfg.Path
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, SocketDirMode); err != nil {
			return nil, fmt.Errorf("operator socket directory: %w", err)
		}
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("operator socket %s: exists and is not a socket", path)
		}
		c, err := net.DialTimeout("unix", path, StaleProbeTimeout)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("%s: %w", path, ErrSocketInUse)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("probe operator socket %s: %w", path, err)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale operator socket: %w", err)
		}
	}
	mode, gid := SocketMode, -1
	if o.cfg.Group != "" {
		g, err := lookupGroup(o.cfg.Group)
		if err != nil {
			return nil, fmt.Errorf("operator socket group: %w", err)
		}
		mode, gid = SocketGroupMode, g
	}
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	_ = os.Remove(tmp)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("operator socket: %w", err)
	}
	// The file is renamed: Close must not unlink the temporary name.
	ln.SetUnlinkOnClose(false)
	fail := func(err error) (*net.UnixListener, error) {
		_ = ln.Close()
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("operator socket: %w", err)
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return fail(err)
	}
	if gid >= 0 {
		if err := os.Lchown(tmp, -1, gid); err != nil {
			return fail(err)
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	return ln, nil
}

func lookupGroup(name string) (int, error) {
	if gid, err := strconv.Atoi(name); err == nil && gid >= 0 {
		return gid, nil
	}
	g, err := user.LookupGroup(name)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(g.Gid)
}

// serveConn answers one request.
func (o *Server) serveConn(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	if o.refusePeer != nil {
		pid, uid, err := peerCred(conn)
		if err != nil || o.refusePeer(pid, uid) {
			o.requests.WithLabelValues("unknown", ClassError).Inc()
			o.log.Warn("operator peer refused: a placed instance's process", zap.Int("pid", pid), zap.Uint32("uid", uid), zap.Error(err))
			_ = conn.SetWriteDeadline(time.Now().Add(OperatorWriteTimeout))
			writeResponse(conn, Response{Class: ClassError, Code: CodeForbidden, Reason: "a placed instance may not use the operator socket"})
			return
		}
	}
	_ = conn.SetReadDeadline(time.Now().Add(OperatorReadTimeout))
	line, err := readLine(bufio.NewReaderSize(conn, 4096), MaxOperatorRequestBytes)
	if err != nil {
		code := CodeBadRequest
		if errors.Is(err, errLineTooLong) {
			code = CodeTooLarge
		}
		o.requests.WithLabelValues("unknown", ClassError).Inc()
		writeResponse(conn, Response{Class: ClassError, Code: code, Reason: err.Error()})
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	req, err := decodeRequest(line)
	if err != nil {
		o.requests.WithLabelValues("unknown", ClassError).Inc()
		writeResponse(conn, Response{Class: ClassError, Code: CodeBadRequest, Reason: err.Error()})
		return
	}
	resp := o.backend.Operate(ctx, req)
	verb := req.Verb
	if !o.verbs[verb] {
		verb = "unknown"
	}
	o.requests.WithLabelValues(verb, resp.Class).Inc()
	o.log.Info("operator request", zap.String("verb", verb), zap.String("node", req.Node),
		zap.String("class", resp.Class), zap.String("code", resp.Code))
	_ = conn.SetWriteDeadline(time.Now().Add(OperatorWriteTimeout))
	writeResponse(conn, resp)
}

// decodeRequest strictly decodes one request line: unknown fields
// and anything after the request object are refused, so a second request
// on the line is an error rather than silently dropped.
func decodeRequest(line []byte) (Request, error) {
	var req Request
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return Request{}, fmt.Errorf("decode request: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Request{}, errors.New("decode request: trailing data after the request")
	}
	return req, nil
}

func writeResponse(w io.Writer, resp Response) {
	b, err := json.Marshal(resp)
	if err != nil {
		b, _ = json.Marshal(Response{Class: ClassError, Code: CodeInternal, Reason: "response not encodable"})
	}
	_, _ = w.Write(append(b, '\n'))
}

var errLineTooLong = errors.New("request exceeds the size bound")

// readLine reads one newline-terminated line of at most limit bytes.
func readLine(r *bufio.Reader, limit int) ([]byte, error) {
	var out []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(out)+len(chunk) > limit+1 {
			return nil, fmt.Errorf("%w of %d bytes", errLineTooLong, limit)
		}
		out = append(out, chunk...)
		switch {
		case err == nil:
			return bytes.TrimSuffix(out, []byte("\n")), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return nil, fmt.Errorf("read request: %w", err)
		}
	}
}

// Dial sends req to the daemon on socketPath and returns its
// answer. A socket that is missing or refuses connections is
// ErrDaemonNotRunning. ctx bounds the whole exchange (a place can take
// ctl.PlaceTimeout).
func Dial(ctx context.Context, socketPath string, req Request) (Response, error) {
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "unix", socketPath)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
			return Response{}, fmt.Errorf("%s: %w", socketPath, ErrDaemonNotRunning)
		}
		return Response{}, fmt.Errorf("dial operator socket %s: %w", socketPath, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	return exchange(conn, req)
}

// exchange writes req on conn and reads the answer. A server that refuses
// the peer answers and closes before it reads the request, so the write
// may fail (EPIPE) with the refusal already waiting: it is read all the
// same, and the write's error is reported only when there is no answer.
func exchange(conn net.Conn, req Request) (Response, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return Response{}, fmt.Errorf("encode operator request: %w", err)
	}
	if len(b) > MaxOperatorRequestBytes {
		return Response{}, fmt.Errorf("operator request of %d bytes exceeds %d", len(b), MaxOperatorRequestBytes)
	}
	_, werr := conn.Write(append(b, '\n'))
	line, err := readLine(bufio.NewReaderSize(conn, 64<<10), MaxOperatorResponseBytes)
	if err != nil {
		if werr != nil {
			return Response{}, fmt.Errorf("write operator request: %w", werr)
		}
		return Response{}, fmt.Errorf("read operator response: %w", err)
	}
	var resp Response
	if err := json.Unmarshal(line, &resp); err != nil {
		return Response{}, fmt.Errorf("decode operator response: %w", err)
	}
	return resp, nil
}
