//go:build race

package main

// raceEnabled: under the race detector sync.Pool drops items at random, so
// an allocation budget must allow the one allocation a refill costs.
const raceEnabled = true
