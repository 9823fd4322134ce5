// Package hpackw is queue's HPACK encoder (RFC 7541): the serving
// engine's responses (package h2) and the h2c upstream client's requests
// (package proxy) are encoded by it, and the frames that carry them get
// their 9-byte headers from it (AppendFrameHeader). It writes every field as a literal
// without indexing, so it keeps no state: nothing to share between the
// streams of a connection, and no string of a message kept beyond its
// encoding. It does not check what it encodes: callers pass lowercase,
// valid names and valid values.
//
// It imports nothing of queue's; its functions are safe for concurrent
// use.
package hpackw

import "strconv"

// queue's HPACK encoder (RFC 7541) writes every field as a literal without
// indexing, its name from the static table where it is there: it keeps no
// dynamic table, so it has no state to share between the streams of a
// connection and keeps no string of a response beyond its encoding (a
// stateful encoder would hold on to the strings it indexed). Strings go
// out as they are, not Huffman-coded: on the loopback and the pod network
// a few bytes more cost less than coding them (2,000 instructions a
// response, a tenth of what queue spends on one).

// StaticName returns the static table's index of a name (RFC 7541 Appendix
// A), or 0.
func StaticName(name string) uint64 {
	switch name {
	case ":authority":
		return 1
	case ":method":
		return 2
	case ":path":
		return 4
	case ":scheme":
		return 6
	case ":status":
		return 8
	case "accept-charset":
		return 15
	case "accept-encoding":
		return 16
	case "accept-language":
		return 17
	case "accept-ranges":
		return 18
	case "accept":
		return 19
	case "access-control-allow-origin":
		return 20
	case "age":
		return 21
	case "allow":
		return 22
	case "authorization":
		return 23
	case "cache-control":
		return 24
	case "content-disposition":
		return 25
	case "content-encoding":
		return 26
	case "content-language":
		return 27
	case "content-length":
		return 28
	case "content-location":
		return 29
	case "content-range":
		return 30
	case "content-type":
		return 31
	case "cookie":
		return 32
	case "date":
		return 33
	case "etag":
		return 34
	case "expect":
		return 35
	case "expires":
		return 36
	case "from":
		return 37
	case "host":
		return 38
	case "if-match":
		return 39
	case "if-modified-since":
		return 40
	case "if-none-match":
		return 41
	case "if-range":
		return 42
	case "if-unmodified-since":
		return 43
	case "last-modified":
		return 44
	case "link":
		return 45
	case "location":
		return 46
	case "max-forwards":
		return 47
	case "proxy-authenticate":
		return 48
	case "proxy-authorization":
		return 49
	case "range":
		return 50
	case "referer":
		return 51
	case "refresh":
		return 52
	case "retry-after":
		return 53
	case "server":
		return 54
	case "set-cookie":
		return 55
	case "strict-transport-security":
		return 56
	case "transfer-encoding":
		return 57
	case "user-agent":
		return 58
	case "vary":
		return 59
	case "via":
		return 60
	case "www-authenticate":
		return 61
	}
	return 0
}

// statusIndex returns the static table's index of a whole ":status"
// field, or 0.
func statusIndex(code int) uint64 {
	switch code {
	case 200:
		return 8
	case 204:
		return 9
	case 206:
		return 10
	case 304:
		return 11
	case 400:
		return 12
	case 404:
		return 13
	case 500:
		return 14
	}
	return 0
}

// AppendInt appends i with an n-bit prefix whose high bits are first's.
func AppendInt(b []byte, first byte, n uint, i uint64) []byte {
	k := uint64(1)<<n - 1
	if i < k {
		return append(b, first|byte(i))
	}
	b = append(b, first|byte(k))
	i -= k
	for i >= 128 {
		b = append(b, byte(0x80|i&0x7f))
		i >>= 7
	}
	return append(b, byte(i))
}

// AppendString appends s as a string literal, not Huffman-coded.
func AppendString(b []byte, s string) []byte {
	b = AppendInt(b, 0, 7, uint64(len(s)))
	return append(b, s...)
}

// AppendField appends a literal field without indexing; name is lowercase.
func AppendField(b []byte, name, value string) []byte {
	if i := StaticName(name); i != 0 {
		b = AppendInt(b, 0, 4, i)
	} else {
		b = append(b, 0)
		b = AppendString(b, name)
	}
	return AppendString(b, value)
}

// AppendStatus appends the :status field of code, indexed when the
// static table has it whole.
func AppendStatus(b []byte, code int) []byte {
	if i := statusIndex(code); i != 0 {
		return AppendInt(b, 0x80, 7, i)
	}
	var d [3]byte
	return AppendField(b, ":status", string(strconv.AppendInt(d[:0], int64(code), 10)))
}

// AppendFrameHeader appends an HTTP/2 frame's 9-byte header (RFC 9113
// section 4.1): the payload's length n, the type, the flags and the
// stream id, its reserved bit cleared.
func AppendFrameHeader(b []byte, n int, typ, flags uint8, id uint32) []byte {
	return append(b, byte(n>>16), byte(n>>8), byte(n), typ, flags,
		byte(id>>24)&0x7f, byte(id>>16), byte(id>>8), byte(id))
}
