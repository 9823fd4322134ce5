package gostack

import "testing"

// deep uses about 6 KiB of stack over 24 frames, like a connection
// goroutine in the middle of a proxied request.
//
//go:noinline
func deep(n int) byte {
	var frame [256]byte
	frame[n] = byte(n)
	if n == 0 {
		return frame[0]
	}
	return deep(n-1) + frame[n]
}

// BenchmarkGoroutine: a new goroutine that reaches 6 KiB of stack, left to
// grow it in the middle of the calls or grown first.
func BenchmarkGoroutine(b *testing.B) {
	for _, grow := range []bool{false, true} {
		name := "grows"
		if grow {
			name = "grown"
		}
		b.Run(name, func(b *testing.B) {
			done := make(chan byte)
			for b.Loop() {
				go func() {
					if grow {
						Grow()
					}
					done <- deep(23)
				}()
				<-done
			}
		})
	}
}
