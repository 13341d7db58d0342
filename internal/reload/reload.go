package reload

import (
	"errors"
	"slices"
)

// Prepared is a change a component accepted: Commit puts it in force,
// Abort drops it. Exactly one of them is called, once.
type Prepared interface {
	Commit()
	Abort()
}

// Commit is a Prepared that holds nothing until it commits: the function
// applies the change (nil applies nothing), and Abort does nothing.
type Commit func()

// Commit calls f.
func (f Commit) Commit() {
	if f != nil {
		f()
	}
}

// Abort does nothing: a Commit holds nothing.
func (Commit) Abort() {}

// Step is one component's part of a reload.
type Step struct {
	// Name says whose part it is (for a reader and a debugger).
	Name string
	// Prepare checks the component's part of the next config against the
	// running component and returns the change, or why it refuses.
	Prepare func() (Prepared, error)
}

// All prepares every step in order, reporting every refusal at once (each
// error as its step returned it). When one refuses, the steps prepared so
// far are aborted, last first, and nothing changes. Otherwise the returned
// Prepared commits them in order, or aborts them last first.
func All(steps []Step) (Prepared, error) {
	var done list
	var errs []error
	for _, s := range steps {
		p, err := s.Prepare()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if p != nil {
			done = append(done, p)
		}
	}
	if err := errors.Join(errs...); err != nil {
		done.Abort()
		return nil, err
	}
	return done, nil
}

// list is the prepared steps of All.
type list []Prepared

func (l list) Commit() {
	for _, p := range l {
		p.Commit()
	}
}

func (l list) Abort() {
	for _, p := range slices.Backward(l) {
		p.Abort()
	}
}
