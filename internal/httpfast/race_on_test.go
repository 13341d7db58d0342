//go:build race

package httpfast

// raceEnabled: the race detector allocates, so allocation counts are not
// checked under it.
const raceEnabled = true
