//go:build !race

package h1

// raceAcquire and raceRelease tell the race detector what a socket orders
// (rawio_race.go); without it they are nothing.

func raceAcquire(uintptr) {}

func raceRelease(uintptr) {}
