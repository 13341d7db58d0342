//go:build !race

package tlspool

const raceEnabled = false
