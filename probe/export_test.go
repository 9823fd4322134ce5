package probe

import "github.com/queue-dev/queue/internal/clock"

// The Watcher's tests run under testing/synctest, whose fake clock moves
// the runtime's timers, not a timerfd.
func init() { newAlarm = clock.NewTimerAlarm }
