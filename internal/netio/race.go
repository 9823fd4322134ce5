//go:build race

package netio

import "syscall"

// Under the race detector, a raw read or write tells it what the socket
// orders, as the syscall package's Read and Write do for net.Conn: what a
// goroutine did before it wrote is seen by the goroutine that read the
// bytes. Without it, a test that sets state and then sends a request would
// be reported as racing with the handler that reads the state. The calls
// are zero-length reads and writes, whose annotations are the point; they
// cost a system call each, in race builds only.

func raceAcquire(fd uintptr) { syscall.Read(int(fd), nil) }

func raceRelease(fd uintptr) { syscall.Write(int(fd), nil) }
