package ctl

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRateLimiter(t *testing.T) {
	clock := newFakeClock()
	l := NewRateLimiter(0, 0, clock.Now) // defaults: 16 per minute
	type step struct {
		OK         bool
		Suppressed int
	}
	var got []step
	for range 20 {
		ok, s := l.Allow()
		got = append(got, step{ok, s})
	}
	var want []step
	for range UnauthRefusalsPerWindow {
		want = append(want, step{true, 0})
	}
	for range 4 {
		want = append(want, step{false, 0})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("first window (-want +got):\n%s", diff)
	}
	if got := l.Suppressed(); got != 4 {
		t.Fatalf("Suppressed = %d, want 4", got)
	}
	clock.Add(UnauthRefusalWindow - time.Millisecond)
	if ok, _ := l.Allow(); ok {
		t.Fatal("allowed before the window ended")
	}
	clock.Add(time.Millisecond)
	if ok, s := l.Allow(); !ok || s != 5 {
		t.Fatalf("new window: Allow = %v, %d; want true, 5", ok, s)
	}
	if ok, s := l.Allow(); !ok || s != 0 {
		t.Fatalf("then: Allow = %v, %d; want true, 0", ok, s)
	}
}
