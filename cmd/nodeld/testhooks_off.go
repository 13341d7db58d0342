//go:build !nodeld_testhooks

package main

import "flag"

// testHookFlags registers nothing: the shipped binary (built without the
// nodeld_testhooks tag) has no --test-* flag, and its hooks stay off.
func testHookFlags(*flag.FlagSet) func() testFlags {
	return func() testFlags { return testFlags{} }
}
