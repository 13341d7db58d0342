package facts

import (
	"testing"

	"go.uber.org/goleak"
)

// Probe may run nvidia-smi, whose output copying goroutines must be gone
// when Probe returns.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
