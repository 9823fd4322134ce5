package h2

import (
	"github.com/queue-dev/queue/internal/hpackw"
	"github.com/queue-dev/queue/internal/httpsem"
)

// Responses are encoded by internal/hpackw, queue's HPACK encoder, which
// the h2c upstream client shares; its doc says why every field is a
// literal without indexing.

// appendValues appends a field of each valid value
// (httpsem.ValidFieldValue); name is lowercase.
func appendValues(b []byte, name string, values []string) []byte {
	for _, v := range values {
		if httpsem.ValidFieldValue(v) {
			b = hpackw.AppendField(b, name, v)
		}
	}
	return b
}
