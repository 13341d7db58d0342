package table

import (
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nodeld/nodeld/internal/grammar"
)

// AdvertVersion is the version of the advertisements this table builds.
const AdvertVersion = "1"

// Metadata keys of an infer advertisement.
const (
	MetaRole    = "role"
	MetaNodeID  = "node_id"
	MetaAPI     = "api"
	MetaRuntime = "runtime"
	MetaModel   = "model"
	// MetaLoad is inflight/capacity as a decimal fraction ("0", "0.25",
	// "1.5"); lower is better.
	MetaLoad = "load"
	// MetaHealth is "up" for an instance that answers its health probe.
	MetaHealth = "health"
)

// HealthUp is the MetaHealth value of a serving instance.
const HealthUp = "up"

// advertMethods are the inference methods an infer advertisement offers.
var advertMethods = [...]string{"chat.completions", "completions", "embeddings", "models"}

// Advertisement is an infer.<role> service advertisement, as exchanged
// between nodes over the mesh. The instance's port is deliberately absent.
type Advertisement struct {
	Name     string            `json:"name"`
	NodeID   string            `json:"node_id"`
	Methods  []string          `json:"methods"`
	Version  string            `json:"version"`
	Metadata map[string]string `json:"metadata"`
	// LastUpdated is the sender's clock in Unix seconds. A receiver never
	// uses it for freshness.
	LastUpdated int64 `json:"last_updated"`
}

// Advertisement returns the infer.<role> advertisement of this node, only
// when role is served locally and exposed to the mesh; it describes the
// elected registration. now stamps LastUpdated.
func (t *Table) Advertisement(role string, now time.Time) (Advertisement, bool) {
	t.mu.RLock()
	l, ok := t.localLocked(role)
	_, exposed := t.exposed[role]
	t.mu.RUnlock()
	if !ok || !exposed {
		return Advertisement{}, false
	}
	md := map[string]string{
		MetaRole:    role,
		MetaNodeID:  t.nodeID,
		MetaAPI:     l.api,
		MetaRuntime: l.runtime,
		MetaLoad:    t.loadString(role),
		MetaHealth:  HealthUp,
	}
	if l.model != "" {
		md[MetaModel] = l.model
	}
	return Advertisement{
		Name:        ServicePrefix + role,
		NodeID:      t.nodeID,
		Methods:     slices.Clone(advertMethods[:]),
		Version:     AdvertVersion,
		Metadata:    md,
		LastUpdated: now.Unix(),
	}, true
}

// Advertisements returns the advertisements of every exposed local role,
// sorted by name.
func (t *Table) Advertisements(now time.Time) []Advertisement {
	t.mu.RLock()
	var roles []string
	for role := range t.local {
		if _, ok := t.exposed[role]; ok {
			roles = append(roles, role)
		}
	}
	t.mu.RUnlock()
	slices.Sort(roles) // name = prefix + role, so this sorts by name
	ads := make([]Advertisement, 0, len(roles))
	for _, role := range roles {
		// A role deregistered meanwhile is simply left out.
		if ad, ok := t.Advertisement(role, now); ok {
			ads = append(ads, ad)
		}
	}
	return ads
}

// loadString formats Options.Load for role, rounded to three decimals so
// that small jitter does not change the advertisement.
func (t *Table) loadString(role string) string {
	if t.load == nil {
		return "0"
	}
	inflight, capacity := t.load(role)
	if capacity <= 0 || inflight <= 0 {
		return "0"
	}
	v := math.Round(float64(inflight)/float64(capacity)*1000) / 1000
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// parseLoad reads a MetaLoad value. Anything that is not a finite,
// non-negative number ranks worst.
func parseLoad(s string) float64 {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return math.Inf(1)
	}
	return v
}

// IngestAdvertisement takes an advertisement received from sender, the node
// id the mesh connection was verified as (never a field of the message).
// It returns whether the advertisement was taken.
//
// A workload-host advertisement (HostAdvertName) is kept apart, one per
// sender, under the same sender binding and admission rules but with no
// allowlist (see ingestHost and HostAdverts).
//
// Ignored silently: another name without ServicePrefix, an invalid role,
// and sender == this node. Refused and handed to Options.RecordRefusal
// (KindAdvertRefused), in this order: ad.NodeID != sender
// (ReasonOtherNode); no Admission or sender not admitted
// (ReasonNotAdmitted); sender not on role's use_from allowlist
// (ReasonNotAllowed); oversized methods or metadata (ReasonTooLarge).
//
// A taken advertisement replaces the sender's previous one for the role,
// with its receipt time (Options.Now) as the start of its TTL; a repeat
// refreshes the TTL. The generation is bumped when the sender is new for
// the role, its previous entry had expired, its methods or its metadata
// other than load changed, or the order of the role's candidates changed
// (a load change that reorders them). Load jitter that changes no
// resolution does not bump, so advertisement exchanges triggered by table
// changes cannot feed each other.
func (t *Table) IngestAdvertisement(sender string, ad Advertisement) bool {
	if ad.Name == HostAdvertName && sender != t.nodeID {
		return t.ingestHost(sender, ad)
	}
	if strings.HasPrefix(ad.Name, DemandPrefix) {
		return t.ingestStandby(sender, ad)
	}
	role, ok := strings.CutPrefix(ad.Name, ServicePrefix)
	if !ok || !grammar.ValidName(role) || sender == t.nodeID {
		return false
	}
	refuse := func(why string) bool {
		t.recordRefusal(sender, why, AdvertRefusedEvent{
			Role: role, Sender: sender, AdvertisedNode: ad.NodeID, Why: why,
		})
		return false
	}
	if ad.NodeID != sender {
		return refuse(ReasonOtherNode)
	}
	if !t.admitted(sender) {
		return refuse(ReasonNotAdmitted)
	}
	t.mu.Lock()
	if !hasMember(t.allow, role, sender) {
		t.mu.Unlock()
		return refuse(ReasonNotAllowed)
	}
	if !withinLimits(ad, MaxAdvertMetadata) {
		t.mu.Unlock()
		return refuse(ReasonTooLarge)
	}
	now := t.now()
	before := candidateOrder(t.candidatesLocked(role, now))
	changed := t.putLocked(role, sender, ad, now)
	if !changed {
		changed = !slices.Equal(before, candidateOrder(t.candidatesLocked(role, now)))
	}
	var e effects
	if changed {
		t.bump(&e)
	}
	t.mu.Unlock()
	t.finish(e)
	return true
}

// withinLimits checks a received advertisement against MaxAdvertMethods,
// MaxAdvertFieldLen and maxMetadata entries.
func withinLimits(ad Advertisement, maxMetadata int) bool {
	if len(ad.Methods) > MaxAdvertMethods || len(ad.Metadata) > maxMetadata {
		return false
	}
	for _, m := range ad.Methods {
		if len(m) > MaxAdvertFieldLen {
			return false
		}
	}
	for k, v := range ad.Metadata {
		if len(k) > MaxAdvertFieldLen || len(v) > MaxAdvertFieldLen {
			return false
		}
	}
	return true
}

func metadataEqualButLoad(a, b map[string]string) bool {
	for k, v := range a {
		if k == MetaLoad {
			continue
		}
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok && k != MetaLoad {
			return false
		}
	}
	return true
}

func cloneAdvert(ad Advertisement) Advertisement {
	ad.Methods = slices.Clone(ad.Methods)
	ad.Metadata = maps.Clone(ad.Metadata)
	return ad
}
