package httpfast

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestExchangeCtx checks that the fast reader's exchange context behaves
// as context.WithCancelCause's: Done, Err and Cause after cancel (the
// first cause wins), functions registered with AfterFunc (directly and
// through context.AfterFunc and children) run once cancelled unless
// stopped first.
func TestExchangeCtx(t *testing.T) {
	errStalled := errors.New("stalled")
	c := newExchangeCtx()
	if c.Err() != nil || c.Cause() != nil {
		t.Fatalf("new context: err %v cause %v", c.Err(), c.Cause())
	}
	ran := make(chan string, 4)
	stopA := c.AfterFunc(func() { ran <- "a" })
	stopB := c.AfterFunc(func() { ran <- "b" })
	stopC := context.AfterFunc(c, func() { ran <- "c" })
	child, cancelChild := context.WithCancel(c)
	defer cancelChild()
	if !stopB() {
		t.Fatal("stop before cancel returned false")
	}
	if stopB() {
		t.Fatal("a second stop returned true")
	}
	done := c.Done()
	select {
	case <-done:
		t.Fatal("Done closed before cancel")
	default:
	}
	c.Cancel(errStalled)
	c.Cancel(errors.New("second"))
	got := map[string]bool{}
	for range 2 {
		select {
		case s := <-ran:
			got[s] = true
		case <-time.After(testDeadline):
			t.Fatalf("functions run after cancel: %v", got)
		}
	}
	if !got["a"] || !got["c"] {
		t.Fatalf("ran %v, want a and c", got)
	}
	for _, ch := range []<-chan struct{}{done, c.Done(), child.Done()} {
		select {
		case <-ch:
		case <-time.After(testDeadline):
			t.Fatal("a Done channel not closed after cancel")
		}
	}
	if c.Err() != context.Canceled || c.Cause() != errStalled || Cause(c) != errStalled {
		t.Fatalf("after cancel: err %v cause %v", c.Err(), c.Cause())
	}
	if stopA() || stopC() {
		t.Fatal("stop after the function ran returned true")
	}
	select {
	case s := <-ran:
		t.Fatalf("%s ran after being stopped", s)
	default:
	}
	// Registered after cancel: runs at once.
	c.AfterFunc(func() { ran <- "late" })
	select {
	case <-ran:
	case <-time.After(testDeadline):
		t.Fatal("a function registered after cancel did not run")
	}
	// A context cancelled before anyone asked for Done.
	d := newExchangeCtx()
	d.Cancel(nil)
	select {
	case <-d.Done():
	default:
		t.Fatal("Done of a cancelled context is open")
	}
	if d.Cause() != context.Canceled {
		t.Fatalf("cause %v, want context.Canceled", d.Cause())
	}
}
