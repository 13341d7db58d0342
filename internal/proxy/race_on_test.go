//go:build race

package proxy

// raceEnabled: the race detector allocates, so allocation counts are not
// checked under it.
const raceEnabled = true
