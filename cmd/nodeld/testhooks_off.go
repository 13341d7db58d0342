//go:build !nodeld_testhooks

package main

import "flag"

// testFlags are none in the shipped binary (built without the
// nodeld_testhooks tag): it has no --test-* flag, and its hooks stay off.
type testFlags struct{}

// testHookFlags registers nothing.
func testHookFlags(*flag.FlagSet) func() testFlags {
	return func() testFlags { return testFlags{} }
}

// apply sets nothing.
func (testFlags) apply(*nodeDeps, map[string]any) {}
