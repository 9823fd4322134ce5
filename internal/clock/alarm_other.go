//go:build !linux

package clock

import "time"

// alarmFD is none outside Linux: an Alarm is a time.Timer.
type alarmFD struct{}

func (*alarmFD) open(func()) bool  { return false }
func (*alarmFD) set(time.Duration) {}
func (*alarmFD) close()            {}
