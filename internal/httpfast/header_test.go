package httpfast

import (
	"net/http"
	"testing"
)

// Value agrees with Header.Get for canonical keys, present, absent or
// empty, and with repeated values.
func TestValueIsGetForCanonicalKeys(t *testing.T) {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Add("Accept", "a")
	h.Add("Accept", "b")
	h["Content-Encoding"] = []string{}
	for _, k := range []string{"Content-Type", "Accept", "Content-Encoding", "X-Absent"} {
		if k != http.CanonicalHeaderKey(k) {
			t.Fatalf("%q is not canonical", k)
		}
		if got, want := Value(h, k), h.Get(k); got != want {
			t.Errorf("Value(%q) = %q, Get = %q", k, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = Value(h, "Accept") }); n != 0 {
		t.Errorf("Value allocates %v times", n)
	}
}
