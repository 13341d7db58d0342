package dispatch

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nodeld/nodeld/internal/pkg"
)

// ErrTooManyOffers is wrapped by Place when MaxOffers offers are held.
var ErrTooManyOffers = errors.New("too many package offers in flight")

// offer is a package the dispatcher serves for one decision, to one node.
type offer struct {
	target string
	dir    string
	files  map[string]pkg.File
	// live counts calls holding the offer; expires is set once it is 0.
	live    int
	expires time.Time
}

// offers holds the packages being placed, by decision id.
type offers struct {
	now func() time.Time

	// mu guards byID.
	mu   sync.Mutex
	byID map[string]*offer
}

func newOffers(now func() time.Time) *offers {
	return &offers{now: now, byID: make(map[string]*offer)}
}

// add offers v's files to target under decisionID until release is called,
// then for OfferGrace more.
func (o *offers) add(decisionID, target string, v *pkg.Verified) (release func(), err error) {
	files := make(map[string]pkg.File, len(v.Manifest.Files))
	for _, f := range v.Manifest.Files {
		files[f.Path] = f
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pruneLocked()
	if of, ok := o.byID[decisionID]; ok {
		if of.target != target || of.dir != v.Dir {
			return nil, fmt.Errorf("decision %s is already offered for another place", decisionID)
		}
		of.live++
	} else {
		if len(o.byID) >= MaxOffers {
			return nil, fmt.Errorf("%w (%d)", ErrTooManyOffers, MaxOffers)
		}
		o.byID[decisionID] = &offer{target: target, dir: v.Dir, files: files, live: 1}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			o.mu.Lock()
			defer o.mu.Unlock()
			if of, ok := o.byID[decisionID]; ok {
				of.live--
				if of.live == 0 {
					of.expires = o.now().Add(OfferGrace)
				}
			}
		})
	}, nil
}

// lookup returns the live offer of decisionID.
func (o *offers) lookup(decisionID string) (*offer, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pruneLocked()
	of, ok := o.byID[decisionID]
	return of, ok
}

// len counts the offers held, expired ones dropped.
func (o *offers) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pruneLocked()
	return len(o.byID)
}

func (o *offers) pruneLocked() {
	now := o.now()
	for id, of := range o.byID {
		if of.live == 0 && !now.Before(of.expires) {
			delete(o.byID, id)
		}
	}
}
