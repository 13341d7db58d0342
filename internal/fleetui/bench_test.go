package fleetui

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/operator"
)

// The large fleet of issue 27's acceptance 3.
const (
	largeNodes      = 100
	largePlacements = 1000
	largeDecisions  = 50
)

// BenchmarkFleetData is /ui/data of a controller with 1,000 placements on
// 100 nodes and 50 recent decisions, through the real operator.Router:
// go test -run '^$' -bench 'BenchmarkFleet' -benchmem ./internal/fleetui/
func BenchmarkFleetData(b *testing.B) {
	benchRoute(b, "/ui/data")
}

// BenchmarkFleetPage is the whole page (/ui/) of the same fleet.
func BenchmarkFleetPage(b *testing.B) {
	benchRoute(b, "/ui/")
}

// BenchmarkFleetSections is what an event stream does on each poll:
// assemble the data and render every section.
func BenchmarkFleetSections(b *testing.B) {
	f := newFixture(b, largeNodes, largePlacements, largeDecisions)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.ui.render(f.ui.Snapshot()); err != nil {
			b.Fatal(err)
		}
	}
}

func benchRoute(b *testing.B, path string) {
	f := newFixture(b, largeNodes, largePlacements, largeDecisions)
	h := f.ui.Handler()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	var size int
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("%s = %d", path, w.Code)
		}
		size = w.Body.Len()
	}
	b.ReportMetric(float64(size), "bytes/op-body")
}

// TestLargeFleetIsBounded: with 1,000 placements the page lists the
// operator's bounded rows, and says how many it left out.
func TestLargeFleetIsBounded(t *testing.T) {
	f := newFixture(t, largeNodes, largePlacements, largeDecisions)
	d := f.ui.Snapshot()
	if got := len(d.Fleet.Placements); got != operator.MaxFleetPlacements || d.Fleet.PlacementsTotal != largePlacements {
		t.Errorf("placements: %d rows of %d", got, d.Fleet.PlacementsTotal)
	}
	// The lost ones come first.
	if d.Fleet.Placements[0].Life != "lost" {
		t.Errorf("first row is %s, want a lost placement first", d.Fleet.Placements[0].Life)
	}
	if len(d.Fleet.Nodes) != largeNodes || len(d.Fleet.Decisions) != largeDecisions {
		t.Errorf("nodes %d, decisions %d", len(d.Fleet.Nodes), len(d.Fleet.Decisions))
	}
	w := get(t, f.ui.Handler(), "/ui/")
	if body := w.Body.String(); !strings.Contains(body, "200 of 1000 shown") {
		t.Error("the page does not say it left placements out")
	}
	t.Logf("page %d bytes", w.Body.Len())
}
