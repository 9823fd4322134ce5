package httpsem

import "strings"

// The grammar the tables of this package's tests are checked against,
// spelled from the ABNF of RFC 9110 (sections 5.5 and 5.6.2) and RFC 5234
// (appendix B.1), one production per function.

// rfcDigit is DIGIT: %x30-39.
func rfcDigit(c byte) bool { return '0' <= c && c <= '9' }

// rfcAlpha is ALPHA: %x41-5A / %x61-7A.
func rfcAlpha(c byte) bool { return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' }

// rfcTchar is tchar: "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" /
// "." / "^" / "_" / "`" / "|" / "~" / DIGIT / ALPHA.
func rfcTchar(c byte) bool {
	return rfcDigit(c) || rfcAlpha(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// rfcFieldVchar is field-vchar: VCHAR (%x21-7E) / obs-text (%x80-FF).
func rfcFieldVchar(c byte) bool { return 0x21 <= c && c <= 0x7e || c >= 0x80 }

// rfcFieldValue is field-value = *field-content, with field-content =
// field-vchar [ 1*( SP / HTAB / field-vchar ) field-vchar ]: empty, or
// field-vchar at both ends with SP, HTAB and field-vchar between.
func rfcFieldValue(v string) bool {
	if v == "" {
		return true
	}
	if !rfcFieldVchar(v[0]) || !rfcFieldVchar(v[len(v)-1]) {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; !rfcFieldVchar(c) && c != ' ' && c != '\t' {
			return false
		}
	}
	return true
}

// h2FieldName is a regular field name HTTP/2 and HTTP/3 accept: a token
// (RFC 9110 section 5.1) with no uppercase letter (RFC 9113 section 8.2.1,
// RFC 9114 section 4.2).
func h2FieldName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !rfcTchar(c) || 'A' <= c && c <= 'Z' {
			return false
		}
	}
	return true
}
