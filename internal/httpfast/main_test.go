package httpfast

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

// testDeadline bounds every wait in these tests; reaching it is a failure.
const testDeadline = 10 * time.Second

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
