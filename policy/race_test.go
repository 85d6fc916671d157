//go:build race

package policy

// raceEnabled is true in a -race build: the random property tests, single-goroutine and
// pure, then run a smaller, still covering count (the race detector finds nothing more in
// them and slows them tenfold); the non-race pass of `make test` runs the full count.
const raceEnabled = true
