package usage

import "slices"

// Window is how many recent values a Ring keeps: a fixed ring, so memory
// per metric is constant.
const Window = 256

// Ring is a fixed ring of the last Window values. The zero Ring is empty
// and ready to use.
type Ring struct {
	vals [Window]float64
	n    int // values held, at most Window
	next int // where the next value goes
}

// Add keeps v, dropping the oldest value when the ring is full.
func (r *Ring) Add(v float64) {
	r.vals[r.next] = v
	r.next = (r.next + 1) % Window
	r.n = min(r.n+1, Window)
}

// Len returns how many values the ring holds.
func (r *Ring) Len() int { return r.n }

// Median returns the median of the values held (the mean of the middle
// two for an even count), and 0 when there are none.
func (r *Ring) Median() float64 {
	if r.n == 0 {
		return 0
	}
	vals := slices.Clone(r.vals[:r.n])
	slices.Sort(vals)
	if r.n%2 == 1 {
		return vals[r.n/2]
	}
	return (vals[r.n/2-1] + vals[r.n/2]) / 2
}
