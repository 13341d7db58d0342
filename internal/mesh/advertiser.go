package mesh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/table"
)

// advertiser is the advertisement exchange: it sends each linked peer the
// advertisements the table's serving policy lets it see (when its link
// comes up, on every table change and every advert interval) and reports
// the rounds peers send (table.PeerRound).
type advertiser struct {
	ps          *peerSet
	events      *eventQueue
	tbl         AdvertTable
	extra       func() []table.Advertisement
	now         func() time.Time
	restartWait time.Duration
	log         *zap.Logger
	met         *metrics
}

// receive takes one advert frame from l's peer and reports it
// (PeerRound), acknowledging it once delivered. The sender id is the
// link's verified id, whatever the advertisements say. ctx ends with the
// link or the mesh.
func (ad *advertiser) receive(ctx context.Context, l *link, s *Stream) {
	_ = s.SetReadDeadline(time.Now().Add(AdvertSendTimeout))
	fail := func(code StreamCode, result string, err error) {
		s.Reset(code)
		ad.met.stream(KindAdvert, result)
		ad.log.Debug("advert stream refused", zap.String("peer", l.peerID), zap.Error(err))
	}
	typ, payload, err := ReadFrame(s, MaxAdvertFrameBytes)
	switch {
	case errors.Is(err, ErrFrameTooLarge):
		fail(StreamCodeTooLarge, resultTooLarge, err)
		return
	case err != nil:
		fail(StreamCodeMalformed, resultMalformed, err)
		return
	case typ != FrameAdverts:
		fail(StreamCodeMalformed, resultMalformed, fmt.Errorf("frame type %d", typ))
		return
	}
	ads, err := decodeAdverts(payload)
	if errors.Is(err, errTooManyAdverts) {
		fail(StreamCodeTooLarge, resultTooLarge, err)
		return
	}
	if err != nil {
		fail(StreamCodeMalformed, resultMalformed, err)
		return
	}
	var one [1]byte
	if n, err := s.Read(one[:]); n > 0 || !errors.Is(err, io.EOF) {
		fail(StreamCodeMalformed, resultMalformed, fmt.Errorf("data after the advert frame: %v", err))
		return
	}
	// Which link the round came on, decided with the link changes it is
	// ordered among. A round read while its link was being lost lands
	// after the loss (RoundLate). A peer that restarted a moment ago is
	// still waited for: a round of its old link is as any other's
	// (RoundOther), and only a round of its current link ends the wait.
	ad.ps.mu.Lock()
	p := l.peer
	gone := p.link == nil
	waiting := gone && !p.awayAt.IsZero() && time.Since(p.awayAt) < ad.restartWait
	round := table.RoundOther
	switch {
	case p.link == l:
		round = table.RoundCurrent
	case gone && !waiting:
		round = table.RoundLate
	}
	done := make(chan struct{})
	ad.events.emit(queuedEvent{ev: table.PeerEvent{Kind: table.PeerRound, Node: l.peerID, Adverts: ads, Round: round}, done: done})
	ad.ps.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		s.Reset(StreamCodeCancelled)
		return
	}
	_ = s.CloseWrite()
	ad.met.stream(KindAdvert, resultOK)
}

// sender sends l's peer a round of advertisements whenever poked,
// one round at a time, until l is retired.
func (ad *advertiser) sender(l *link) {
	for {
		select {
		case <-l.done:
			return
		case <-l.kick:
		}
		if err := ad.send(l); err != nil {
			ad.log.Debug("advertisements not sent", zap.String("peer", l.peerID), zap.Error(err))
		}
	}
}

// advertsFor is the advert frame for a peer: the table's advertisements of
// the roles it serves to that peer (by id or configured name; default
// deny), then the extra advertisements every peer gets.
func (ad *advertiser) advertsFor(peerID, peerName string) []table.Advertisement {
	all := ad.tbl.Advertisements(ad.now())
	ads := all[:0:0]
	for _, adv := range all {
		role, _ := strings.CutPrefix(adv.Name, table.ServicePrefix)
		if !ad.tbl.MeshPeerAllowed(role, peerID) && (peerName == "" || !ad.tbl.MeshPeerAllowed(role, peerName)) {
			continue
		}
		ads = append(ads, adv)
	}
	if ad.extra != nil {
		ads = append(ads, ad.extra()...)
	}
	if len(ads) > MaxAdvertsPerFrame {
		ad.log.Warn("advertisements over the frame bound left out", zap.Int("count", len(ads)))
		ads = ads[:MaxAdvertsPerFrame]
	}
	return ads
}

func (ad *advertiser) send(l *link) error {
	ad.ps.mu.Lock()
	runCtx, name := ad.ps.runCtx, l.peer.cfg.Name
	ad.ps.mu.Unlock()
	if runCtx == nil {
		return nil
	}
	payload, err := encodeAdverts(ad.advertsFor(l.peerID, name))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(runCtx, AdvertSendTimeout)
	defer cancel()
	stop := context.AfterFunc(l.conn.Context(), cancel)
	defer stop()
	qs, err := l.conn.OpenStreamSync(ctx)
	if err != nil {
		return fmt.Errorf("open advert stream: %w", err)
	}
	s := newStream(qs)
	ad.met.stream(KindAdvert, resultOpened)
	deadline, _ := ctx.Deadline()
	_ = s.SetDeadline(deadline)
	if _, err := s.Write([]byte{byte(KindAdvert)}); err != nil {
		s.Reset(StreamCodeCancelled)
		return fmt.Errorf("write advert stream: %w", err)
	}
	if err := WriteFrame(s, FrameAdverts, payload); err != nil {
		s.Reset(StreamCodeCancelled)
		return fmt.Errorf("write advert frame: %w", err)
	}
	_ = s.CloseWrite()
	// The receiver closes its side once it has taken the frame.
	var one [1]byte
	if n, err := s.Read(one[:]); n > 0 || !errors.Is(err, io.EOF) {
		s.StopReading(StreamCodeMalformed)
		return fmt.Errorf("advert stream not acknowledged: %v", err)
	}
	return nil
}

// loop pokes every link's advert sender on table changes and every
// advert interval.
func (ad *advertiser) loop(ctx context.Context) {
	sub, unsub := ad.tbl.Subscribe()
	defer unsub()
	ad.ps.mu.Lock()
	interval := ad.ps.cfg.advertInterval()
	ad.ps.mu.Unlock()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sub:
		case <-t.C:
			ad.ps.mu.Lock()
			if iv := ad.ps.cfg.advertInterval(); iv != interval {
				interval = iv
				t.Reset(iv)
			}
			ad.ps.mu.Unlock()
		}
		ad.pokeAll()
	}
}

func (ad *advertiser) pokeAll() {
	ad.ps.mu.Lock()
	defer ad.ps.mu.Unlock()
	for _, p := range ad.ps.peers {
		if p.link != nil {
			p.link.poke()
		}
	}
}
