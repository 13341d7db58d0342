//go:build !linux

package host

// freeDisk is unknown outside Linux; the fetch then fails on a full disk.
func freeDisk(string) (uint64, bool) { return 0, false }
