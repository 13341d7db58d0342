package host

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/atomicfile"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/pkg"
)

// NoticesFile is the replay log of signed revocation notices in the data
// directory: one standard base64 line per notice, oldest first, mode 0600.
const NoticesFile = "notices.log"

// NoticeFrame is the one frame of a mesh.KindNotice stream: the signed
// notice exactly as pkg.SignNotice produced it.
const NoticeFrame mesh.FrameType = 1

// Chain record kinds of notices.
const (
	// KindNoticeApplied: a verified notice changed the list's sequence
	// (issuer, seq, action, subject, from).
	KindNoticeApplied = "host.notice.applied"
	// KindNoticeRefused: a notice that does not verify (through the
	// Recorder, keyed by sender and code).
	KindNoticeRefused = "host.notice.refused"
)

// ErrNoticeRefused is wrapped by SubmitNotice for a notice that does not
// verify against this node's key and controllers.
var ErrNoticeRefused = errors.New("revocation notice refused")

// peerLister is the optional part of Mesh that lists linked peers
// (*mesh.Mesh has it); without it notices are not forwarded.
type peerLister interface {
	LinkedPeers() []mesh.PeerInfo
}

var _ peerLister = (*mesh.Mesh)(nil)

// noticeEntry is one notice of the replay log.
type noticeEntry struct {
	raw         []byte
	kind, value string
}

// notices is the host's side of signed revocation notices: it applies
// the notices of this node's operator and of its peers to the revocation
// list, keeps the replay log, forwards a new notice to every other
// linked peer and replays the log to a peer whose link comes up.
type notices struct {
	self   *identity.Identity
	mesh   Mesh // nil: local notices only, nothing forwarded or replayed
	rev    *pkg.Revocations
	config func() Config
	jnl    *journal
	met    *metrics
	log    *zap.Logger
	now    func() time.Time
	// replayWait paces a notice replay (Deps.ReplayWait, else
	// WaitReplayPace).
	replayWait func(ctx context.Context, peerID string, sent int) error

	// mu serialises applying a notice and rewriting the log, so the log
	// follows the list's order; it is held across the log file write and
	// never taken under another of the host's locks.
	mu sync.Mutex
	// entries is the log, oldest first; guarded by mu.
	entries []noticeEntry
	// lastReplay is when each peer was last replayed to; guarded by mu.
	lastReplay map[string]time.Time
}

// keys are the keys whose notices this node applies: its own key
// and its controllers'.
func (n *notices) keys() []ed25519.PublicKey {
	return append([]ed25519.PublicKey{n.self.PublicKey()}, n.config().Controllers...)
}

func (n *notices) path() string { return filepath.Join(n.config().DataDir, NoticesFile) }

// load reads the replay log and applies every notice that still
// verifies (stale ones are kept: the list already holds them); notices
// that no longer verify are dropped from the log.
func (n *notices) load() error {
	path := n.path()
	data, err := readNoticeLog(path)
	if err != nil {
		return err
	}
	raws, err := decodeNoticeLog(data)
	if err != nil {
		return fmt.Errorf("notice log %q: %w", path, err)
	}
	keys := n.keys()
	n.mu.Lock()
	defer n.mu.Unlock()
	dropped := 0
	for _, raw := range raws {
		notice, err := pkg.VerifyNotice(raw, keys)
		if err != nil {
			dropped++
			n.log.Warn("notice in log no longer verifies", zap.Error(err))
			continue
		}
		if _, err := n.rev.ApplyNotice(notice); err != nil && !errors.Is(err, pkg.ErrStaleNotice) {
			return fmt.Errorf("apply logged notice: %w", err)
		}
		n.entries = addNoticeEntry(n.entries, notice)
	}
	if dropped > 0 {
		return n.writeLogLocked()
	}
	return nil
}

func readNoticeLog(path string) ([]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open notice log: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxNoticeLogBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read notice log %q: %w", path, err)
	}
	if len(data) > maxNoticeLogBytes {
		return nil, fmt.Errorf("notice log %q exceeds %d bytes", path, maxNoticeLogBytes)
	}
	return data, nil
}

// decodeNoticeLog splits the log into raw notices: at most MaxNoticeLog
// lines of standard base64, each decoding to at most pkg.MaxNoticeBytes.
// It does not verify them.
func decodeNoticeLog(data []byte) ([][]byte, error) {
	if len(data) > maxNoticeLogBytes {
		return nil, fmt.Errorf("notice log has %d bytes, limit %d", len(data), maxNoticeLogBytes)
	}
	var out [][]byte
	for i, line := range bytes.Split(data, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		if len(out) == MaxNoticeLog {
			return nil, fmt.Errorf("notice log has more than %d notices", MaxNoticeLog)
		}
		if base64.StdEncoding.DecodedLen(len(line)) > pkg.MaxNoticeBytes+2 {
			return nil, fmt.Errorf("notice log line %d is longer than a notice", i+1)
		}
		raw := make([]byte, base64.StdEncoding.DecodedLen(len(line)))
		n, err := base64.StdEncoding.Decode(raw, line)
		if err != nil {
			return nil, fmt.Errorf("notice log line %d: %w", i+1, err)
		}
		if n > pkg.MaxNoticeBytes {
			return nil, fmt.Errorf("notice log line %d is longer than a notice", i+1)
		}
		out = append(out, raw[:n])
	}
	return out, nil
}

// addNoticeEntry keeps one notice per subject, the newest: a revoke or
// unrevoke replaces any earlier notice about the same subject (so lifting
// a revocation removes the revoke notice), and the oldest entries go
// beyond MaxNoticeLog.
func addNoticeEntry(entries []noticeEntry, n pkg.Notice) []noticeEntry {
	out := entries[:0:0]
	for _, e := range entries {
		if e.kind != n.Subject.Kind || e.value != n.Subject.Value {
			out = append(out, e)
		}
	}
	out = append(out, noticeEntry{raw: n.Raw, kind: n.Subject.Kind, value: n.Subject.Value})
	if len(out) > MaxNoticeLog {
		out = out[len(out)-MaxNoticeLog:]
	}
	return out
}

// writeLogLocked replaces the log file with the entries (temp file,
// fsync, rename, directory fsync). n.mu must be held.
func (n *notices) writeLogLocked() error {
	var buf bytes.Buffer
	for _, e := range n.entries {
		buf.WriteString(base64.StdEncoding.EncodeToString(e.raw))
		buf.WriteByte('\n')
	}
	return atomicfile.WriteFile(n.path(), buf.Bytes(), 0o600)
}

// apply verifies raw and applies it. applied is false, with a nil
// error, for a stale or duplicate notice (ignored: that is what ends
// gossip loops). A notice that does not verify is recorded (through the
// Recorder) and its error wraps ErrNoticeRefused. from is the sending peer ("" for
// the local operator).
func (n *notices) apply(raw []byte, from string) (applied bool, err error) {
	notice, err := pkg.VerifyNotice(raw, n.keys())
	if err != nil {
		n.met.notices.WithLabelValues(noticeRefused).Inc()
		n.refuse(from, err)
		return false, fmt.Errorf("%w: %w", ErrNoticeRefused, err)
	}
	n.mu.Lock()
	_, err = n.rev.ApplyNotice(notice)
	if errors.Is(err, pkg.ErrStaleNotice) {
		n.mu.Unlock()
		n.met.notices.WithLabelValues(noticeStale).Inc()
		return false, nil
	}
	if err != nil {
		n.mu.Unlock()
		n.met.notices.WithLabelValues(noticeError).Inc()
		return false, fmt.Errorf("apply notice: %w", err)
	}
	n.met.notices.WithLabelValues(noticeApplied).Inc()
	n.entries = addNoticeEntry(n.entries, notice)
	if werr := n.writeLogLocked(); werr != nil {
		n.log.Warn("notice log not written", zap.Error(werr))
	}
	n.mu.Unlock()
	src := from
	if src == "" {
		src = "local"
	}
	_ = n.jnl.record(KindNoticeApplied, map[string]any{
		"issuer": identity.NodeID(notice.Issuer), "seq": notice.Seq, "action": notice.Action,
		"subject": map[string]string{"kind": notice.Subject.Kind, "value": notice.Subject.Value, "reason": notice.Subject.Reason},
		"from":    src,
	})
	return true, nil
}

// refuse records a notice from peer from ("" for the local
// operator) that does not verify. Any linked peer can send notices at
// will, so it goes through the Recorder, keyed by the sender and the
// pkg.VerifyError code.
func (n *notices) refuse(from string, err error) {
	code := ""
	if ve, isVE := errors.AsType[*pkg.VerifyError](err); isVE {
		code = ve.Code
	}
	sender := from
	if sender == "" {
		sender = n.self.ID()
	}
	n.jnl.repeatable(sender, KindNoticeRefused, code, map[string]any{"from": from, "code": code, "reason": err.Error()})
}

// submit is Host.SubmitNotice.
func (n *notices) submit(ctx context.Context, raw []byte) error {
	if len(raw) > pkg.MaxNoticeBytes {
		return fmt.Errorf("submit notice: %d bytes, limit %d", len(raw), pkg.MaxNoticeBytes)
	}
	applied, err := n.apply(raw, "")
	if err != nil {
		return fmt.Errorf("submit notice: %w", err)
	}
	if !applied {
		return fmt.Errorf("submit notice: %w", pkg.ErrStaleNotice)
	}
	n.forward(ctx, raw, "")
	return nil
}

// serve is the mesh handler of KindNotice: one NoticeFrame, applied
// and, when new, forwarded to every other linked peer.
func (n *notices) serve(ctx context.Context, peer mesh.PeerInfo, s *mesh.Stream) {
	_ = s.SetReadDeadline(time.Now().Add(NoticeTimeout))
	typ, raw, err := mesh.ReadFrame(s, pkg.MaxNoticeBytes)
	if err != nil || typ != NoticeFrame {
		s.Reset(mesh.StreamCodeMalformed)
		n.log.Debug("notice stream", zap.String("peer", peer.ID), zap.Error(err))
		return
	}
	s.StopReading(0)
	applied, err := n.apply(raw, peer.ID)
	// The sender waits for this close: the notice is applied by then.
	_ = s.CloseWrite()
	if err != nil {
		n.log.Info("notice not applied", zap.String("peer", peer.ID), zap.Error(err))
		return
	}
	if applied {
		n.forward(context.WithoutCancel(ctx), raw, peer.ID)
	}
}

// forward sends raw to every linked peer but except, at most
// NoticeForwardConcurrency at once; failures are logged.
func (n *notices) forward(ctx context.Context, raw []byte, except string) {
	pl, ok := n.mesh.(peerLister)
	if n.mesh == nil || !ok {
		return
	}
	slots := make(chan struct{}, NoticeForwardConcurrency)
	var wg sync.WaitGroup
	for _, p := range pl.LinkedPeers() {
		if p.ID == except {
			continue
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := n.send(ctx, p.ID, raw); err != nil {
				n.log.Info("notice not forwarded", zap.String("peer", p.ID), zap.Error(err))
			}
		})
	}
	wg.Wait()
}

// send sends one notice on its own stream and waits (NoticeTimeout)
// for the receiver to close it, which it does once it handled the notice.
func (n *notices) send(ctx context.Context, peerID string, raw []byte) error {
	ctx, cancel := context.WithTimeout(ctx, NoticeTimeout)
	defer cancel()
	s, err := n.mesh.OpenStream(ctx, peerID, mesh.KindNotice)
	if err != nil {
		return err
	}
	stop, err := s.Request(ctx, NoticeFrame, raw)
	defer stop()
	if err != nil {
		return fmt.Errorf("send notice to %s: %w", peerID, err)
	}
	if _, err := io.Copy(io.Discard, io.LimitReader(s, 1)); err != nil {
		return fmt.Errorf("send notice to %s: %w", peerID, err)
	}
	return nil
}

// replayTo is Host.ReplayNotices: the replay log to peer, paced, at
// most one complete replay per NoticeReplayCooldown.
func (n *notices) replayTo(ctx context.Context, peer mesh.PeerInfo) {
	if n.mesh == nil {
		return
	}
	now := n.now()
	n.mu.Lock()
	if last, ok := n.lastReplay[peer.ID]; ok && now.Sub(last) < NoticeReplayCooldown {
		n.mu.Unlock()
		return
	}
	for id, t := range n.lastReplay {
		if now.Sub(t) >= NoticeReplayCooldown {
			delete(n.lastReplay, id)
		}
	}
	entries := n.entries
	n.mu.Unlock()
	if len(entries) == 0 {
		return
	}
	if err := n.replay(ctx, peer.ID, entries); err != nil {
		// Cut short: the next link up replays again.
		n.met.replays.WithLabelValues(replayStopped).Inc()
		n.log.Info("notice replay stopped", zap.String("peer", peer.ID), zap.Error(err))
		return
	}
	n.met.replays.WithLabelValues(replayComplete).Inc()
	n.mu.Lock()
	if n.lastReplay == nil {
		n.lastReplay = map[string]time.Time{}
	}
	n.lastReplay[peer.ID] = n.now()
	n.mu.Unlock()
}

func (n *notices) replay(ctx context.Context, peerID string, entries []noticeEntry) error {
	for i, e := range entries {
		if i > 0 {
			if err := n.replayWait(ctx, peerID, i); err != nil {
				return err
			}
		}
		// The link may have gone while the last send or the pause took.
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := n.send(ctx, peerID, e.raw); err != nil {
			return err
		}
	}
	return nil
}

// WaitReplayPace is the default Deps.ReplayWait: NoticeReplayPace, or
// until ctx ends.
func WaitReplayPace(ctx context.Context, _ string, _ int) error {
	t := time.NewTimer(NoticeReplayPace)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
