//go:build linux

package sandbox

import (
	"sync"
	"testing"
)

// TestConcurrentDetectionsAgree: several isolators made at once in one
// process (nodes in one test binary, or a reload beside a start) each
// find the cgroups that one finds alone. Before the probe child was
// named per call, two probes of one process collided (EEXIST, or one
// removed the other's) and a node came up believing it could not create
// cgroups, refusing every instance that declared resources.
func TestConcurrentDetectionsAgree(t *testing.T) {
	if _, err := detectCgroups(); err != nil {
		t.Skipf("this machine gives the test process no cgroups to create: %v", err)
	}
	const n = 32
	var wg sync.WaitGroup
	errs := make([]error, n)
	for range 20 {
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				_, errs[i] = detectCgroups()
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("detection %d of %d made at once: %v", i, n, err)
			}
		}
	}
}
