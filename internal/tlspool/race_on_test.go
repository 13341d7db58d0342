//go:build race

package tlspool

// raceEnabled: the race detector allocates, so allocation counts are not
// checked under it.
const raceEnabled = true
