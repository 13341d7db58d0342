//go:build nodeld_testhooks

package main

import (
	"context"
	"flag"
	"time"

	"go.uber.org/zap"
)

// testFlags are the --test-* flags of nodeld run, registered only in a
// binary built with the nodeld_testhooks tag (this file), which the tests
// that need the hooks build nodeld with (nodeldBinary): the shipped
// binary has none of them, so no operator can turn a test hook on.
type testFlags struct {
	// clockOffset (--test-clock-offset) shifts the clock of the
	// dispatcher and the host (workload.ctl and revocation notices,
	// signed and checked), so a fault test can skew one node in a network
	// namespace, which cannot have a clock of its own.
	clockOffset time.Duration
	// holdAfterPlace (--test-hold-after-place) and holdBeforePlace
	// (--test-hold-before-place) hold the controller on its place path
	// until the process is killed (tests of a controller killed there).
	holdAfterPlace, holdBeforePlace bool
}

// testHookFlags registers nodeld run's --test-* flags.
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

// apply sets the hooks the flags ask for on d, and says the clock offset
// in the node.start entry start.
func (f testFlags) apply(d *nodeDeps, start map[string]any) {
	log := d.log
	if off := f.clockOffset; off != 0 {
		d.now = func() time.Time { return time.Now().Add(off) }
		start["test_clock_offset"] = off.String()
		log.Warn("test clock offset in force: workload.ctl calls are signed and checked with a shifted clock", zap.Duration("offset", off))
	}
	if f.holdAfterPlace {
		d.hooks.place.After = func(ctx context.Context, _ string) error {
			log.Warn("test hook: holding after a place answer, before the controller records it")
			<-ctx.Done()
			return nil
		}
	}
	if f.holdBeforePlace {
		d.hooks.place.Before = func(ctx context.Context) {
			log.Warn("test hook: holding before a place is sent, after the controller persisted its candidate")
			<-ctx.Done()
		}
	}
}
