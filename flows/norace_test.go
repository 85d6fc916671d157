//go:build !race

package flows

// raceEnabled is false outside a -race build (see race_test.go).
const raceEnabled = false
