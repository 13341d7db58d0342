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
