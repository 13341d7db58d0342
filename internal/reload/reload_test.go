package reload

import (
	"errors"
	"slices"
	"testing"
)

// rec is a component that records what happened to its changes.
type rec struct {
	log *[]string
	tag string
}

func (r rec) Commit() { *r.log = append(*r.log, "commit "+r.tag) }
func (r rec) Abort()  { *r.log = append(*r.log, "abort "+r.tag) }

func step(log *[]string, name string, err error) Step {
	return Step{Name: name, Prepare: func() (Prepared, error) {
		*log = append(*log, "prepare "+name)
		if err != nil {
			return nil, err
		}
		return rec{log: log, tag: name}, nil
	}}
}

func TestAllCommitsInOrder(t *testing.T) {
	var log []string
	p, err := All([]Step{step(&log, "a", nil), step(&log, "b", nil), {Name: "none", Prepare: func() (Prepared, error) { return Commit(nil), nil }}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"prepare a", "prepare b"}; !slices.Equal(log, want) {
		t.Fatalf("before commit: %q, want %q (Prepare changes nothing)", log, want)
	}
	p.Commit()
	if want := []string{"prepare a", "prepare b", "commit a", "commit b"}; !slices.Equal(log, want) {
		t.Errorf("log %q, want %q", log, want)
	}
}

func TestAllAbortsEveryPreparedOnARefusal(t *testing.T) {
	var log []string
	errB, errD := errors.New("b refuses"), errors.New("d refuses")
	p, err := All([]Step{step(&log, "a", nil), step(&log, "b", errB), step(&log, "c", nil), step(&log, "d", errD)})
	if p != nil {
		t.Fatalf("All = %v, want nil on a refusal", p)
	}
	if !errors.Is(err, errB) || !errors.Is(err, errD) {
		t.Errorf("err %v, want both refusals", err)
	}
	want := []string{"prepare a", "prepare b", "prepare c", "prepare d", "abort c", "abort a"}
	if !slices.Equal(log, want) {
		t.Errorf("log %q, want %q", log, want)
	}
}

func TestAllAbortLastFirst(t *testing.T) {
	var log []string
	p, err := All([]Step{step(&log, "a", nil), step(&log, "b", nil)})
	if err != nil {
		t.Fatal(err)
	}
	p.Abort()
	if want := []string{"prepare a", "prepare b", "abort b", "abort a"}; !slices.Equal(log, want) {
		t.Errorf("log %q, want %q", log, want)
	}
}

func TestCommitFunc(t *testing.T) {
	n := 0
	c := Commit(func() { n++ })
	c.Abort()
	if n != 0 {
		t.Fatal("Abort applied the change")
	}
	c.Commit()
	Commit(nil).Commit()
	if n != 1 {
		t.Errorf("applied %d times, want 1", n)
	}
}
