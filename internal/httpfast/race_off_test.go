//go:build !race

package httpfast

const raceEnabled = false
