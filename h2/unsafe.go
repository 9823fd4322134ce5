package h2

import "unsafe"

// unsafeString views b as a string, for as long as b is not changed.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
