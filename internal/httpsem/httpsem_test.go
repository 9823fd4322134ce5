package httpsem

import (
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestIsTchar: IsTchar accepts exactly the token characters of RFC 9110
// section 5.6.2: each row names the rule it checks, and every byte value
// is checked against the ABNF's tchar.
func TestIsTchar(t *testing.T) {
	for _, tt := range []struct {
		rule string
		c    byte
		want bool
	}{
		{"tchar DIGIT low", '0', true},
		{"tchar DIGIT high", '9', true},
		{"tchar ALPHA lowercase", 'a', true},
		{"tchar ALPHA lowercase end", 'z', true},
		{"tchar ALPHA uppercase", 'A', true},
		{"tchar ALPHA uppercase end", 'Z', true},
		{"tchar !", '!', true},
		{"tchar #", '#', true},
		{"tchar $", '$', true},
		{"tchar %", '%', true},
		{"tchar &", '&', true},
		{"tchar '", '\'', true},
		{"tchar *", '*', true},
		{"tchar +", '+', true},
		{"tchar -", '-', true},
		{"tchar .", '.', true},
		{"tchar ^", '^', true},
		{"tchar _", '_', true},
		{"tchar `", '`', true},
		{"tchar |", '|', true},
		{"tchar ~", '~', true},
		{"delimiter DQUOTE", '"', false},
		{"delimiter (", '(', false},
		{"delimiter )", ')', false},
		{"delimiter ,", ',', false},
		{"delimiter /", '/', false},
		{"delimiter :", ':', false},
		{"delimiter ;", ';', false},
		{"delimiter <", '<', false},
		{"delimiter =", '=', false},
		{"delimiter >", '>', false},
		{"delimiter ?", '?', false},
		{"delimiter @", '@', false},
		{"delimiter [", '[', false},
		{"delimiter \\", '\\', false},
		{"delimiter ]", ']', false},
		{"delimiter {", '{', false},
		{"delimiter }", '}', false},
		{"SP is no tchar", ' ', false},
		{"HTAB is no tchar", '\t', false},
		{"CTL NUL", 0x00, false},
		{"CTL CR", '\r', false},
		{"CTL LF", '\n', false},
		{"CTL US", 0x1f, false},
		{"DEL", 0x7f, false},
		{"obs-text low", 0x80, false},
		{"obs-text high", 0xff, false},
	} {
		if got := IsTchar(tt.c); got != tt.want {
			t.Errorf("%s: IsTchar(%q) = %v, want %v", tt.rule, tt.c, got, tt.want)
		}
	}
	for c := range 256 {
		if got, want := IsTchar(byte(c)), rfcTchar(byte(c)); got != want {
			t.Errorf("IsTchar(%#02x) = %v, want %v (RFC 9110 tchar)", c, got, want)
		}
	}
}

// TestParseDigits: ParseDigits reads Content-Length = 1*DIGIT (RFC 9110
// section 8.6) of up to 18 digits, which always fits an int64, and rejects
// anything else: signs, whitespace, lists, other bases, and longer runs.
func TestParseDigits(t *testing.T) {
	for _, tt := range []struct {
		rule string
		in   string
		want int64
		ok   bool
	}{
		{"1*DIGIT: one digit", "0", 0, true},
		{"1*DIGIT: several", "1234", 1234, true},
		{"1*DIGIT: leading zeros are digits", "007", 7, true},
		{"18 digits fit an int64", "999999999999999999", 999999999999999999, true},
		{"1*DIGIT: empty", "", 0, false},
		{"more than 18 digits", "1000000000000000000", 0, false},
		{"more than int64 holds", "99999999999999999999", 0, false},
		{"no sign +", "+1", 0, false},
		{"no sign -", "-1", 0, false},
		{"no leading whitespace", " 1", 0, false},
		{"no trailing whitespace", "1 ", 0, false},
		{"no list", "1,1", 0, false},
		{"no hexadecimal", "0x10", 0, false},
		{"no fraction", "1.0", 0, false},
		{"no letter", "12a", 0, false},
		{"no non-ASCII digit", "١", 0, false},
	} {
		got, ok := ParseDigits(tt.in)
		if ok != tt.ok || got != tt.want {
			t.Errorf("%s: ParseDigits(%q) = %d, %v, want %d, %v", tt.rule, tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// TestSetOrigin: SetOrigin reads an origin-form target (RFC 9112 section
// 3.2.1: absolute-path [ "?" query ]) into the URL net/url reads from it
// (the same Path, EscapedPath, RawQuery and ForceQuery), so that what goes
// upstream (RequestURI) is the target as the client sent it, escapes and
// reserved characters included; a path with a malformed percent-escape
// (RFC 3986 section 2.1) is refused.
func TestSetOrigin(t *testing.T) {
	for _, tt := range []struct {
		rule   string
		target string
		ok     bool
	}{
		{"absolute-path: root", "/", true},
		{"absolute-path: segments", "/a/b/c", true},
		{"absolute-path: empty segments", "//a//", true},
		{"pchar: unreserved", "/AZaz09-._~", true},
		{"pchar: sub-delims net/url escapes", "/!'()*", true},
		{"pchar: sub-delims net/url keeps", "/$&+,;=", true},
		{"pchar: : and @", "/a:b@c", true},
		{"pct-encoded: space", "/a%20b", true},
		{"pct-encoded: slash stays encoded", "/a%2Fb", true},
		{"pct-encoded: unreserved stays encoded", "/%41", true},
		{"pct-encoded: lowercase hex", "/%7e", true},
		{"query", "/a?b=c&d=e", true},
		{"empty query is kept", "/a?", true},
		{"query with ? and /", "/a?b=/c?d", true},
		{"query is not unescaped", "/a?b=%zz", true},
		{"query with escapes", "/a%20b?c=%20", true},
		{"pct-encoded: bad hex digit", "/a%zz", false},
		{"pct-encoded: cut short", "/a%2", false},
		{"pct-encoded: lone %", "/a%", false},
	} {
		var u url.URL
		ok := SetOrigin(&u, tt.target)
		if ok != tt.ok {
			t.Errorf("%s: SetOrigin(%q) = %v, want %v", tt.rule, tt.target, ok, tt.ok)
			continue
		}
		if !ok {
			continue
		}
		want, err := url.ParseRequestURI(tt.target)
		if err != nil {
			t.Errorf("%s: url.ParseRequestURI(%q): %v", tt.rule, tt.target, err)
			continue
		}
		if u.Path != want.Path || u.EscapedPath() != want.EscapedPath() || u.RawQuery != want.RawQuery || u.ForceQuery != want.ForceQuery {
			t.Errorf("%s: SetOrigin(%q): Path %q EscapedPath() %q RawQuery %q ForceQuery %v, want %q %q %q %v as net/url",
				tt.rule, tt.target, u.Path, u.EscapedPath(), u.RawQuery, u.ForceQuery, want.Path, want.EscapedPath(), want.RawQuery, want.ForceQuery)
		}
		if got := u.RequestURI(); got != tt.target {
			t.Errorf("%s: SetOrigin(%q): RequestURI() = %q, want the target unchanged", tt.rule, tt.target, got)
		}
	}
}

// TestAppendTrailerKeys: the Trailer field is a list of field names (RFC
// 9110 section 6.6.2), over any number of lines; AppendTrailerKeys appends
// each name as its canonical header key, in order, after what dst held,
// with the optional whitespace around elements and the empty elements a
// recipient ignores (RFC 9110 section 5.6.1.2) left out.
func TestAppendTrailerKeys(t *testing.T) {
	for _, tt := range []struct {
		rule  string
		lines []string // Trailer's lines; nil for no Trailer field
		dst   []string
		want  []string
	}{
		{"no Trailer field", nil, nil, nil},
		{"one name, canonical key", []string{"grpc-status"}, nil, []string{"Grpc-Status"}},
		{"#field-name: a list", []string{"a,b-c"}, nil, []string{"A", "B-C"}},
		{"OWS around elements", []string{" a ,\tb\t, c"}, nil, []string{"A", "B", "C"}},
		{"empty elements are ignored", []string{",a,,b,"}, nil, []string{"A", "B"}},
		{"only empty elements", []string{"", " , ,"}, nil, nil},
		{"several lines, in order", []string{"x", "y, z"}, nil, []string{"X", "Y", "Z"}},
		{"appends after dst", []string{"b"}, []string{"Kept"}, []string{"Kept", "B"}},
	} {
		h := http.Header{}
		if tt.lines != nil {
			h["Trailer"] = tt.lines
		}
		got := AppendTrailerKeys(slices.Clone(tt.dst), h)
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: AppendTrailerKeys(%q, Trailer %q) = %q, want %q", tt.rule, tt.dst, tt.lines, got, tt.want)
		}
	}
}

// TestAppendDate: AppendDate appends, after what b held, the current time
// as an IMF-fixdate (RFC 9110 section 5.6.7: "Sun, 06 Nov 1994 08:49:37
// GMT", 29 bytes), to the second: a time between the second the call began
// in and its end. Concurrent callers all get such a date.
func TestAppendDate(t *testing.T) {
	check := func(b []byte, before, after time.Time) string {
		s := string(b)
		if len(s) < 7 || s[:7] != "Date: [" || s[len(s)-1] != ']' {
			return "lost the prefix or suffix: " + s
		}
		v := s[7 : len(s)-1]
		if len(v) != 29 || v[len(v)-4:] != " GMT" {
			return "not an IMF-fixdate: " + v
		}
		d, err := time.Parse(http.TimeFormat, v)
		if err != nil {
			return "not an IMF-fixdate: " + err.Error()
		}
		if d.Before(before.Truncate(time.Second)) || d.After(after) {
			return "date " + v + " outside the call, from " + before.UTC().Format(time.RFC3339Nano) + " to " + after.UTC().Format(time.RFC3339Nano)
		}
		return ""
	}
	before := time.Now()
	b := append(AppendDate([]byte("Date: [")), ']')
	if msg := check(b, before, time.Now()); msg != "" {
		t.Error(msg)
	}

	var wg sync.WaitGroup
	errs := make(chan string, 8*20)
	for range 8 {
		wg.Go(func() {
			for range 20 {
				before := time.Now()
				b := append(AppendDate([]byte("Date: [")), ']')
				if msg := check(b, before, time.Now()); msg != "" {
					errs <- msg
				}
			}
		})
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		t.Fatal("concurrent AppendDate calls not done after 10s")
	}
	close(errs)
	for msg := range errs {
		t.Error("concurrent call: " + msg)
	}
}
