package host

import (
	"testing"

	"github.com/nodeld/nodeld/internal/ctl"
)

// decodeInstanceConfig refuses anything after the config object, a stray
// closing bracket included (json.Decoder's More does not see one).
func TestDecodeInstanceConfigTrailingData(t *testing.T) {
	for _, bad := range []string{`{"port":1}}`, `{"port":1}]`, `{"port":1} {}`, `{"port":1} x`, `{"port":1,"x":2}`} {
		var c ctl.InstanceConfig
		if err := decodeInstanceConfig([]byte(bad), &c); err == nil {
			t.Errorf("decodeInstanceConfig(%s) = %+v, nil error", bad, c)
		}
	}
	var c ctl.InstanceConfig
	if err := decodeInstanceConfig([]byte(" {\"port\":1,\"workload\":\"w\"}\n"), &c); err != nil || c != (ctl.InstanceConfig{Port: 1, Workload: "w"}) {
		t.Fatalf("decodeInstanceConfig = %+v, %v", c, err)
	}
}
