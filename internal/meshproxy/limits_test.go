package meshproxy

import (
	"testing"

	"github.com/nodeld/nodeld/internal/proxy"
)

func TestCheckMeshLimits(t *testing.T) {
	tests := []struct {
		name           string
		perPeer, total int
		maxBody        int64
		wantErr        bool
	}{
		{"defaults", 0, 0, 0, false},
		{"at the bounds", MaxMeshInflight, MaxMeshInflight, proxy.MaxBodyBytesLimit, false},
		{"per peer over", MaxMeshInflight + 1, 0, 0, true},
		{"total over", 0, MaxMeshInflight + 1, 0, true},
		{"negative", -1, 0, 0, true},
		{"body over", 0, 0, proxy.MaxBodyBytesLimit + 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := CheckLimits(tt.perPeer, tt.total, tt.maxBody); (err != nil) != tt.wantErr {
				t.Errorf("CheckLimits(%d, %d, %d) = %v, want error %v", tt.perPeer, tt.total, tt.maxBody, err, tt.wantErr)
			}
		})
	}
}
