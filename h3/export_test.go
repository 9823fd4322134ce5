package h3

import "time"

// SetRetryWindow makes s count handshakes for its Retry threshold over d
// instead of a second, so that a test's handshakes fall in one window
// however slowly the machine runs them. Call it before Serve.
func SetRetryWindow(s *Server, d time.Duration) { s.retry.window = d }
