//go:build !race

package meshproxy

const raceEnabled = false
