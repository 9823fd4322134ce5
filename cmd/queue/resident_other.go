//go:build !linux

package main

// releaseStartupPages does nothing outside Linux (see resident_linux.go).
func releaseStartupPages() (int64, error) { return 0, nil }
