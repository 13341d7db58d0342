package mesh

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// heartbeat is the payload of a liveness datagram. Its content carries no
// meaning: any datagram heard on a link proves the peer is alive.
var heartbeat = []byte{0x01}

// liveness is failure detection on links: heartbeat datagrams both ways,
// and a link that hears none for the liveness timeout closed as dead.
type liveness struct {
	log *zap.Logger
	met *metrics
}

// watch keeps l honest about its peer being alive, independently
// of the keep-alive period: both ends send a heartbeat datagram every
// livenessInterval, and a link that has heard nothing for the liveness
// timeout is closed with CodeDead. Closing it retires the link at once
// (links.serveLink -> links.linkLost, which reports the loss: the table drops the
// peer's routes), and its in-flight streams fail instead of hanging until
// QUIC's idle timeout.
// A peer that did not negotiate datagrams is left to the idle timeout.
// It returns when the link stops being its peer's link or its connection
// ends.
func (lv liveness) watch(l *link, timeout time.Duration) {
	if !l.conn.ConnectionState().SupportsDatagrams.Remote {
		lv.log.Debug("peer does not send liveness datagrams; relying on the idle timeout", zap.String("peer", l.peerID))
		return
	}
	ctx, cancel := context.WithCancel(l.conn.Context())
	defer cancel()

	heard := make(chan struct{}, 1)
	recvDone := make(chan struct{})
	sendDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		for {
			if _, err := l.conn.ReceiveDatagram(ctx); err != nil {
				return
			}
			select {
			case heard <- struct{}{}:
			default:
			}
		}
	}()
	go func() {
		// Sending may block while the connection cannot send (a dead
		// peer fills the congestion window); it never delays the check.
		defer close(sendDone)
		t := time.NewTicker(livenessInterval(timeout))
		defer t.Stop()
		for {
			if err := l.conn.SendDatagram(heartbeat); err != nil && ctx.Err() != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	defer func() {
		cancel()
		<-recvDone
		<-sendDone
	}()

	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.done:
			return
		case <-heard:
			deadline.Reset(timeout)
		case <-deadline.C:
			lv.met.dead.Inc()
			lv.log.Warn("peer link dead: no liveness heartbeat", zap.String("peer", l.peerID), zap.Duration("timeout", timeout))
			_ = l.conn.CloseWithError(CodeDead, "liveness timeout")
			return
		}
	}
}

// livenessInterval is the heartbeat period for a liveness timeout: eight
// heartbeats per timeout, so a few lost datagrams never close a link.
func livenessInterval(timeout time.Duration) time.Duration {
	return max(timeout/LivenessHeartbeatsPerTimeout, MinLivenessInterval)
}
