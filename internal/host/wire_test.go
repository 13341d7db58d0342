package host

import "testing"

const testDecision = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

func TestTailUTF8(t *testing.T) {
	tests := []struct {
		give     string
		n        int
		want     string
		wantTrim bool
	}{
		{give: "hello", n: 10, want: "hello"},
		{give: "héllo", n: 4, want: "llo", wantTrim: true},
		{give: "aé", n: 1, want: "", wantTrim: true},
	}
	for _, tt := range tests {
		got, cut := tailUTF8([]byte(tt.give), tt.n)
		if got != tt.want || cut != tt.wantTrim {
			t.Errorf("tailUTF8(%q, %d) = %q %v, want %q %v", tt.give, tt.n, got, cut, tt.want, tt.wantTrim)
		}
	}
}

func TestInstanceIDDeterministic(t *testing.T) {
	a := InstanceID("echo", "1.0", "default", testDecision, InstanceConfig{}, "n-1")
	if b := InstanceID("echo", "1.0", "default", testDecision, InstanceConfig{}, "n-1"); a != b {
		t.Errorf("same input, ids %q and %q", a, b)
	}
	for _, other := range []string{
		InstanceID("echo", "1.1", "default", testDecision, InstanceConfig{}, "n-1"),
		InstanceID("echo", "1.0", "default", testDecision, InstanceConfig{Port: 8080}, "n-1"),
		InstanceID("echo", "1.0", "default", testDecision, InstanceConfig{}, "n-2"),
	} {
		if other == a {
			t.Errorf("different input, same id %q", a)
		}
	}
}
