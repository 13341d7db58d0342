package operator

import "testing"

func TestHumanBytes(t *testing.T) {
	for _, c := range []struct {
		n        uint64
		sep, out string
	}{
		{0, "", "0B"},
		{1023, " ", "1023 B"},
		{1024, "", "1.0KiB"},
		{1536 << 20, " ", "1.5 GiB"},
		{1 << 60, "", "1024.0PiB"},
	} {
		if got := HumanBytes(c.n, c.sep); got != c.out {
			t.Errorf("HumanBytes(%d, %q) = %q, want %q", c.n, c.sep, got, c.out)
		}
	}
}
