package usage

import "testing"

func TestRing(t *testing.T) {
	var r Ring
	if r.Len() != 0 || r.Median() != 0 {
		t.Errorf("empty ring: %d values, median %v", r.Len(), r.Median())
	}
	for _, v := range []float64{5, 1, 3} {
		r.Add(v)
	}
	if got := r.Median(); got != 3 {
		t.Errorf("median of 5 1 3 = %v", got)
	}
	r.Add(10)
	if got := r.Median(); got != 4 {
		t.Errorf("median of 5 1 3 10 = %v, want 4", got)
	}
	// Past Window, the oldest values go.
	for range Window {
		r.Add(100)
	}
	if r.Len() != Window || r.Median() != 100 {
		t.Errorf("after a full window: %d values, median %v", r.Len(), r.Median())
	}
}
