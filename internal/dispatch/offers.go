package dispatch

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nodeld/nodeld/internal/pkg"
)

// ErrTooManyOffers is wrapped by Place and PlaceDecided when MaxOffers
// offers are held.
var ErrTooManyOffers = errors.New("too many package offers in flight")

// offerKey names an offer: a decision, offered to one node. A controller's
// decision that falls through to the next candidate is a new key, so the
// next target is served at once while the one before is not.
type offerKey struct {
	decision, target string
}

// offer is a package the dispatcher serves for one decision, to one node.
type offer struct {
	dir   string
	files map[string]pkg.File
	// live counts calls holding the offer; once it is 0 the offer stays
	// for grace (expires), or goes at once when grace is 0.
	live    int
	grace   time.Duration
	expires time.Time
}

// offers holds the packages being placed, by decision and target.
type offers struct {
	now func() time.Time

	// mu guards byKey.
	mu    sync.Mutex
	byKey map[offerKey]*offer
}

func newOffers(now func() time.Time) *offers {
	return &offers{now: now, byKey: make(map[offerKey]*offer)}
}

// add offers v's files to target under decisionID until release is
// called, then for grace more (0: withdrawn when release is called).
// Several calls may hold one offer (same decision, target and directory);
// it is withdrawn after the last release, with the longest grace asked.
func (o *offers) add(decisionID, target string, v *pkg.Verified, grace time.Duration) (release func(), err error) {
	key := offerKey{decision: decisionID, target: target}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pruneLocked()
	if of, ok := o.byKey[key]; ok {
		if of.dir != v.Dir {
			return nil, fmt.Errorf("decision %s is already offered to %s for another package", decisionID, target)
		}
		of.live++
		of.grace = max(of.grace, grace)
	} else {
		if len(o.byKey) >= MaxOffers {
			return nil, fmt.Errorf("%w (%d)", ErrTooManyOffers, MaxOffers)
		}
		files := make(map[string]pkg.File, len(v.Manifest.Files))
		for _, f := range v.Manifest.Files {
			files[f.Path] = f
		}
		o.byKey[key] = &offer{dir: v.Dir, files: files, live: 1, grace: grace}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			o.mu.Lock()
			defer o.mu.Unlock()
			of, ok := o.byKey[key]
			if !ok {
				return
			}
			of.live--
			switch {
			case of.live > 0:
			case of.grace <= 0:
				delete(o.byKey, key)
			default:
				of.expires = o.now().Add(of.grace)
			}
		})
	}, nil
}

// lookup returns the live offer of decisionID to target.
func (o *offers) lookup(decisionID, target string) (*offer, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pruneLocked()
	of, ok := o.byKey[offerKey{decision: decisionID, target: target}]
	return of, ok
}

// len counts the offers held, expired ones dropped.
func (o *offers) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pruneLocked()
	return len(o.byKey)
}

func (o *offers) pruneLocked() {
	now := o.now()
	for k, of := range o.byKey {
		if of.live == 0 && !now.Before(of.expires) {
			delete(o.byKey, k)
		}
	}
}
