package h3

import (
	"errors"
	"strconv"

	"github.com/quic-go/qpack"
	"golang.org/x/net/http2/hpack"
)

// QPACK (RFC 9204) without a dynamic table: queue advertises a table
// capacity of 0, so that a field section is the static table's entries and
// literals only. Decoding then needs no state across streams, no stream
// waits for the encoder stream, and a field decodes to at most its encoded
// bytes (a literal) or to a static entry of a few bytes; responses are
// encoded as literals with literal names, unless the static table holds
// the whole field (:status 200).

// staticEntry is one entry of QPACK's static table.
type staticEntry struct{ name, value string }

// staticTable is QPACK's static table (RFC 9204 appendix A), read once
// from quic-go's decoder, which holds it, so that it is not typed twice.
var staticTable = func() []staticEntry {
	var t []staticEntry
	dec := qpack.NewDecoder()
	for i := 0; i < 99; i++ {
		// A field section of one indexed field line, static, index i.
		b := []byte{0, 0, 0xc0 | byte(min(i, 63))}
		if i >= 63 {
			b = append(b, byte(i-63))
		}
		f, err := dec.Decode(b)()
		if err != nil {
			panic("h3: QPACK static table: " + err.Error())
		}
		t = append(t, staticEntry{f.Name, f.Value})
	}
	return t
}()

// statusIndex maps a status code to its static table entry, when it has
// one.
var statusIndex = func() map[int]uint64 {
	m := make(map[int]uint64)
	for i, e := range staticTable {
		if e.name == ":status" {
			n, _ := strconv.Atoi(e.value)
			m[n] = uint64(i)
		}
	}
	return m
}()

var (
	errQPACK        = errors.New("h3: QPACK: malformed field section")
	errQPACKDynamic = errors.New("h3: QPACK: dynamic table reference (capacity is 0)")
)

// readInt reads a prefixed integer (RFC 7541 section 5.1) whose prefix is
// the low n bits of p[0]; it returns the value and the bytes used.
func readInt(p []byte, n uint) (uint64, int, error) {
	if len(p) == 0 {
		return 0, 0, errQPACK
	}
	max := uint64(1)<<n - 1
	v := uint64(p[0]) & max
	if v < max {
		return v, 1, nil
	}
	var m uint
	for i := 1; i < len(p); i++ {
		b := p[i]
		v += uint64(b&0x7f) << m
		if b&0x80 == 0 {
			return v, i + 1, nil
		}
		m += 7
		if m >= 63 {
			return 0, 0, errQPACK
		}
	}
	return 0, 0, errQPACK
}

// span is where a decoded string lies: in the static table (static set,
// lo is the entry, hi is 0 for its name and 1 for its value) or in the
// decoder's bytes (lo to hi).
type span struct {
	lo, hi int
	static bool
}

// decoder decodes a field section into one byte slice of literal text and
// the spans of each field's name and value, so that a request's literals
// make one string, not one each.
type decoder struct {
	text  []byte
	spans []span // name, value, name, value...
}

// Write appends Huffman-decoded bytes to the text (hpack.HuffmanDecode's
// writer).
func (d *decoder) Write(p []byte) (int, error) {
	d.text = append(d.text, p...)
	return len(p), nil
}

// decode decodes the field section p. limit bounds the text it keeps.
func (d *decoder) decode(p []byte, limit int) error {
	d.text, d.spans = d.text[:0], d.spans[:0]
	ric, n, err := readInt(p, 8)
	if err != nil {
		return err
	}
	if ric != 0 {
		return errQPACKDynamic
	}
	p = p[n:]
	if _, n, err = readInt(p, 7); err != nil { // Base: meaningless without a table
		return err
	}
	p = p[n:]
	for len(p) > 0 {
		b := p[0]
		switch {
		case b&0x80 != 0: // 1Txxxxxx: indexed field line
			if b&0x40 == 0 {
				return errQPACKDynamic
			}
			i, n, err := readInt(p, 6)
			if err != nil || i >= uint64(len(staticTable)) {
				return errQPACK
			}
			p = p[n:]
			d.spans = append(d.spans, span{int(i), 0, true}, span{int(i), 1, true})
		case b&0xc0 == 0x40: // 01NTxxxx: literal, name from the table
			if b&0x10 == 0 {
				return errQPACKDynamic
			}
			i, n, err := readInt(p, 4)
			if err != nil || i >= uint64(len(staticTable)) {
				return errQPACK
			}
			p = p[n:]
			d.spans = append(d.spans, span{int(i), 0, true})
			if p, err = d.literal(p, 7, limit); err != nil {
				return err
			}
		case b&0xe0 == 0x20: // 001NHxxx: literal, literal name
			var err error
			if p, err = d.literal(p, 3, limit); err != nil {
				return err
			}
			if p, err = d.literal(p, 7, limit); err != nil {
				return err
			}
		default: // post-base forms: the dynamic table
			return errQPACKDynamic
		}
	}
	return nil
}

// literal decodes a string literal whose length has an n-bit prefix, its
// Huffman flag the bit above, into the text.
func (d *decoder) literal(p []byte, n uint, limit int) ([]byte, error) {
	if len(p) == 0 {
		return nil, errQPACK
	}
	huff := p[0]&(1<<n) != 0
	l, k, err := readInt(p, n)
	if err != nil || uint64(len(p)-k) < l {
		return nil, errQPACK
	}
	s := p[k : k+int(l)]
	lo := len(d.text)
	if huff {
		if _, err := hpack.HuffmanDecode(d, s); err != nil {
			return nil, errQPACK
		}
	} else {
		d.text = append(d.text, s...)
	}
	if len(d.text) > limit {
		return nil, errFieldsTooLarge
	}
	d.spans = append(d.spans, span{lo, len(d.text), false})
	return p[k+int(l):], nil
}

var errFieldsTooLarge = errors.New("h3: header list too large")

// appendInt appends a prefixed integer: first holds the bits above the
// n-bit prefix.
func appendInt(b []byte, first byte, n uint, v uint64) []byte {
	max := uint64(1)<<n - 1
	if v < max {
		return append(b, first|byte(v))
	}
	b = append(b, first|byte(max))
	v -= max
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// appendPrefix appends a field section's prefix: no table references.
func appendPrefix(b []byte) []byte { return append(b, 0, 0) }

// appendStatus appends :status, indexed when the static table has it.
func appendStatus(b []byte, code int) []byte {
	if i, ok := statusIndex[code]; ok {
		return appendInt(b, 0xc0, 6, i)
	}
	// Literal with the name of entry 24 (":status").
	b = appendInt(b, 0x50, 4, 24)
	var d [3]byte
	v := strconv.AppendInt(d[:0], int64(code), 10)
	b = appendInt(b, 0, 7, uint64(len(v)))
	return append(b, v...)
}

// appendField appends a literal field with a literal name (lowercase), no
// Huffman coding: cheaper to write, and the bytes go over loopback or a
// datacenter's network.
func appendField(b []byte, name, value string) []byte {
	b = appendInt(b, 0x20, 3, uint64(len(name)))
	b = append(b, name...)
	b = appendInt(b, 0, 7, uint64(len(value)))
	return append(b, value...)
}

// str returns the string of span i, in text (the decoder's text made one
// string) or the static table.
func (d *decoder) str(text string, i int) string {
	s := d.spans[i]
	if s.static {
		e := staticTable[s.lo]
		if s.hi == 0 {
			return e.name
		}
		return e.value
	}
	return text[s.lo:s.hi]
}
