//go:build nodeld_testhooks

package main

import "flag"

// testHookFlags registers nodeld run's --test-* flags: this file is built
// only with the nodeld_testhooks tag, which the tests that need the hooks
// build nodeld with (nodeldBinary); the shipped binary has none of them.
func testHookFlags(fs *flag.FlagSet) func() testFlags {
	clockOffset := fs.Duration("test-clock-offset", 0, "TEST ONLY, never in production: shift the clock this node signs and checks workload.ctl calls and revocation notices with (e.g. 10m, -10m), to test clock skew between nodes")
	holdAfterPlace := fs.Bool("test-hold-after-place", false,
		"for tests only: the controller stops after a node answers a place, before it records the answer, until the process is killed")
	holdBeforePlace := fs.Bool("test-hold-before-place", false,
		"for tests only: the controller stops after it persisted the candidate it is about to place on, before it sends the place, until the process is killed")
	return func() testFlags {
		return testFlags{clockOffset: *clockOffset, holdAfterPlace: *holdAfterPlace, holdBeforePlace: *holdBeforePlace}
	}
}
