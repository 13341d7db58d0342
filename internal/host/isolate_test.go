package host

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestShutdownReleasesIsolation: a host that stops leaves no scratch
// directory (nor cgroup, nor uid) behind for the instances it stopped;
// nothing it started outlives it, and a directory left would hold what
// an instance wrote until the next start swept it.
func TestShutdownReleasesIsolation(t *testing.T) {
	c := newCluster(t, clusterOpts{isolate: true, noRun: true})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.h.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	res, _, err := c.place(t, buildEcho(t, c.publisher), true)
	if err != nil {
		t.Fatalf("place: %v", err)
	}
	scratch := filepath.Join(c.hostNode.Dir, "scratch", res.InstanceID)
	if fi, err := os.Stat(scratch); err != nil || !fi.IsDir() {
		t.Fatalf("scratch directory of the running instance: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("host run: %v", err)
	}
	done <- nil // for the cleanup
	if _, err := os.Stat(scratch); !os.IsNotExist(err) {
		t.Fatalf("scratch directory after the host stopped: stat = %v, want it removed", err)
	}
}
