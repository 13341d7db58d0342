package meshproxy

import (
	"testing"

	"github.com/nodeld/nodeld/internal/httpfast"
)

// TestWatchResetAllocatesNothing: a forward on the fast reader's context
// registers its stream for the reset, no closure or stop function made.
func TestWatchResetAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	ctx := httpfast.NewContext()
	s := &tcpClientStream{}
	n := testing.AllocsPerRun(100, func() {
		if w := watchReset(ctx, s); !w.stop() {
			t.Fatal("stop: the context ended")
		}
	})
	if n != 0 {
		t.Errorf("watching a forward's context allocates %v times", n)
	}
}
