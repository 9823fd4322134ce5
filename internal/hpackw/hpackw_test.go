package hpackw

import (
	"bytes"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// unhex reads the hex dumps of RFC 7541 Appendix C, spaces and all.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// hf is one field of a header list.
type hf struct{ name, value string }

// decodeBlock decodes block with d, checking that it is complete, and
// returns its fields and whether any is marked never-indexed.
func decodeBlock(t testing.TB, d *hpack.Decoder, block []byte) ([]hf, bool, error) {
	t.Helper()
	fs, err := d.DecodeFull(block)
	if err != nil {
		return nil, false, err
	}
	out := make([]hf, len(fs))
	sensitive := false
	for i, f := range fs {
		out[i] = hf{f.Name, f.Value}
		sensitive = sensitive || f.Sensitive
	}
	return out, sensitive, nil
}

func equalFields(a, b []hf) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// encode encodes a header list as queue's engines do: a response's :status
// with AppendStatus, every other field with AppendField.
func encode(t testing.TB, list []hf) []byte {
	t.Helper()
	var b []byte
	for _, f := range list {
		if f.name == ":status" {
			code, err := strconv.Atoi(f.value)
			if err != nil {
				t.Fatalf("bad :status %q", f.value)
			}
			b = AppendStatus(b, code)
			continue
		}
		b = AppendField(b, f.name, f.value)
	}
	return b
}

// TestAppendixCBytes: where the encoder's one representation (a literal
// without indexing, RFC 7541 section 6.2.2, strings not Huffman-coded) or
// its primitives can produce an example of RFC 7541 Appendix C, they
// produce it byte for byte; where the RFC's example uses another
// representation of the same field, the encoder's bytes differ from the
// RFC's only in that representation's pattern bits.
func TestAppendixCBytes(t *testing.T) {
	for _, tt := range []struct {
		rule string
		got  []byte
		want string
	}{
		{"C.1.1: 10 with a 5-bit prefix", AppendInt(nil, 0, 5, 10), "0a"},
		{"C.1.2: 1337 with a 5-bit prefix", AppendInt(nil, 0, 5, 1337), "1f9a0a"},
		{"C.1.3: 42 on an octet boundary", AppendInt(nil, 0, 8, 42), "2a"},
		{"5.1: 2^N-1 takes a zero continuation octet", AppendInt(nil, 0, 4, 15), "0f00"},
		{"5.1: 2^N-1+128 takes two continuation octets", AppendInt(nil, 0, 7, 255), "7f8001"},
		{"5.1: the prefix's high bits are kept", AppendInt(nil, 0xe0, 5, 1337), "ff9a0a"},
		{"C.2.1: the name, a string literal", AppendString(nil, "custom-key"), "0a 6375 7374 6f6d 2d6b 6579"},
		{"C.2.1: the value, a string literal", AppendString(nil, "custom-header"), "0d 6375 7374 6f6d 2d68 6561 6465 72"},
		{"5.2: the empty string", AppendString(nil, ""), "00"},
		{"C.2.2: literal without indexing, indexed name", AppendField(nil, ":path", "/sample/path"), "040c 2f73 616d 706c 652f 7061 7468"},
		// C.2.3 is never indexed (0001 0000); without indexing is 0000 0000,
		// the rest alike.
		{"C.2.3 as without indexing, new name", AppendField(nil, "password", "secret"), "0008 7061 7373 776f 7264 0673 6563 7265 74"},
		{"C.2.4: indexed :method GET", AppendInt(nil, 0x80, 7, 2), "82"},
		{"C.5.3, C.6.3: indexed :status 200", AppendStatus(nil, 200), "88"},
		// C.5.1 and C.5.2 index the field (01, 6-bit prefix: 0x48); without
		// indexing (0000, 4-bit prefix) :status's index 8 gives 0x08.
		{"C.5.1 as without indexing: :status 302", AppendStatus(nil, 302), "0803 333032"},
		{"C.5.2 as without indexing: :status 307", AppendStatus(nil, 307), "0803 333037"},
	} {
		if want := unhex(t, tt.want); !bytes.Equal(tt.got, want) {
			t.Errorf("%s: got %x, want %x", tt.rule, tt.got, want)
		}
	}
}

// The header lists of RFC 7541 Appendix C.3 to C.6, with the RFC's hex
// for each, without Huffman coding and with.
var (
	requests = [][]hf{
		{{":method", "GET"}, {":scheme", "http"}, {":path", "/"}, {":authority", "www.example.com"}},
		{{":method", "GET"}, {":scheme", "http"}, {":path", "/"}, {":authority", "www.example.com"}, {"cache-control", "no-cache"}},
		{{":method", "GET"}, {":scheme", "https"}, {":path", "/index.html"}, {":authority", "www.example.com"}, {"custom-key", "custom-value"}},
	}
	c3 = []string{
		"8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
		"8286 84be 5808 6e6f 2d63 6163 6865",
		"8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
	}
	c4 = []string{
		"8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
		"8286 84be 5886 a8eb 1064 9cbf",
		"8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
	}
	responses = [][]hf{
		{{":status", "302"}, {"cache-control", "private"}, {"date", "Mon, 21 Oct 2013 20:13:21 GMT"}, {"location", "https://www.example.com"}},
		{{":status", "307"}, {"cache-control", "private"}, {"date", "Mon, 21 Oct 2013 20:13:21 GMT"}, {"location", "https://www.example.com"}},
		{{":status", "200"}, {"cache-control", "private"}, {"date", "Mon, 21 Oct 2013 20:13:22 GMT"}, {"location", "https://www.example.com"},
			{"content-encoding", "gzip"}, {"set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"}},
	}
	c5 = []string{
		"4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
		"4803 3330 37c1 c0bf",
		"88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d 54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31",
	}
	c6 = []string{
		"4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
		"4883 640e ffc1 c0bf",
		"88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
	}
)

// TestAppendixCLists: each header list of RFC 7541 Appendix C.3 to C.6, as
// the encoder writes it, decodes (x/net's HPACK decoder) to that list, in
// order, with a fresh decoder for each message and with one decoder kept
// across them as a connection keeps it; no field is marked never-indexed;
// and the encoder leaves the decoder's dynamic table empty (no literal
// with incremental indexing, RFC 7541 section 6.2.1), so that the first
// dynamic index (62) is still invalid after every message. The RFC's own
// hex is decoded first, to the same lists, as a check of the test's data.
func TestAppendixCLists(t *testing.T) {
	for _, tt := range []struct {
		name      string
		lists     [][]hf
		rfc       []string
		tableSize uint32
	}{
		{"C.3", requests, c3, 4096},
		{"C.4", requests, c4, 4096},
		{"C.5", responses, c5, 256},
		{"C.6", responses, c6, 256},
	} {
		rfc := hpack.NewDecoder(tt.tableSize, nil)
		kept := hpack.NewDecoder(tt.tableSize, nil)
		for i, list := range tt.lists {
			got, _, err := decodeBlock(t, rfc, unhex(t, tt.rfc[i]))
			if err != nil || !equalFields(got, list) {
				t.Fatalf("%s.%d: the RFC's hex decodes to %q, %v: the test's data is wrong", tt.name, i+1, got, err)
			}

			block := encode(t, list)
			for _, d := range []struct {
				what string
				dec  *hpack.Decoder
			}{
				{"fresh decoder", hpack.NewDecoder(tt.tableSize, nil)},
				{"decoder kept across messages", kept},
			} {
				got, sensitive, err := decodeBlock(t, d.dec, block)
				if err != nil {
					t.Errorf("%s.%d, %s: decoding %x: %v", tt.name, i+1, d.what, block, err)
					continue
				}
				if !equalFields(got, list) {
					t.Errorf("%s.%d, %s: %x decodes to %q, want %q", tt.name, i+1, d.what, block, got, list)
				}
				if sensitive {
					t.Errorf("%s.%d, %s: %x has a never-indexed field, want literals without indexing", tt.name, i+1, d.what, block)
				}
				if _, err := d.dec.DecodeFull([]byte{0x80 | 62}); err == nil {
					t.Errorf("%s.%d, %s: index 62 decodes after %x: the encoder added to the dynamic table", tt.name, i+1, d.what, block)
				}
			}
		}
	}
}

// staticTable is RFC 7541 Appendix A, index 1 to 61.
var staticTable = [...]hf{
	{":authority", ""}, {":method", "GET"}, {":method", "POST"}, {":path", "/"}, {":path", "/index.html"},
	{":scheme", "http"}, {":scheme", "https"}, {":status", "200"}, {":status", "204"}, {":status", "206"},
	{":status", "304"}, {":status", "400"}, {":status", "404"}, {":status", "500"}, {"accept-charset", ""},
	{"accept-encoding", "gzip, deflate"}, {"accept-language", ""}, {"accept-ranges", ""}, {"accept", ""},
	{"access-control-allow-origin", ""}, {"age", ""}, {"allow", ""}, {"authorization", ""}, {"cache-control", ""},
	{"content-disposition", ""}, {"content-encoding", ""}, {"content-language", ""}, {"content-length", ""},
	{"content-location", ""}, {"content-range", ""}, {"content-type", ""}, {"cookie", ""}, {"date", ""},
	{"etag", ""}, {"expect", ""}, {"expires", ""}, {"from", ""}, {"host", ""}, {"if-match", ""},
	{"if-modified-since", ""}, {"if-none-match", ""}, {"if-range", ""}, {"if-unmodified-since", ""},
	{"last-modified", ""}, {"link", ""}, {"location", ""}, {"max-forwards", ""}, {"proxy-authenticate", ""},
	{"proxy-authorization", ""}, {"range", ""}, {"referer", ""}, {"refresh", ""}, {"retry-after", ""},
	{"server", ""}, {"set-cookie", ""}, {"strict-transport-security", ""}, {"transfer-encoding", ""},
	{"user-agent", ""}, {"vary", ""}, {"via", ""}, {"www-authenticate", ""},
}

// TestStaticName: StaticName gives, for every name of the static table
// (RFC 7541 Appendix A), an index whose entry has that name, and 0 for
// names not in it; the table here is checked against x/net's decoder,
// entry by entry.
func TestStaticName(t *testing.T) {
	d := hpack.NewDecoder(4096, nil)
	for i, e := range staticTable {
		got, _, err := decodeBlock(t, d, AppendInt(nil, 0x80, 7, uint64(i+1)))
		if err != nil || len(got) != 1 || got[0] != e {
			t.Fatalf("static index %d decodes to %q, %v, want %q: the test's table is wrong", i+1, got, err, e)
		}
	}
	for _, e := range staticTable {
		i := StaticName(e.name)
		if i < 1 || i > uint64(len(staticTable)) || staticTable[i-1].name != e.name {
			t.Errorf("StaticName(%q) = %d, want the index of an entry named %q", e.name, i, e.name)
		}
	}
	for _, name := range []string{"x-custom", "Content-Type", ":protocol", "te", "", "content-length "} {
		if i := StaticName(name); i != 0 {
			t.Errorf("StaticName(%q) = %d, want 0: not in the static table", name, i)
		}
	}
}

// TestAppendStatus: every status code from 100 to 999 decodes as :status
// with that code; those whose whole field is in the static table (200,
// 204, 206, 304, 400, 404, 500) go out as its one-octet indexed field
// (RFC 7541 section 6.1).
func TestAppendStatus(t *testing.T) {
	for i, e := range staticTable {
		if e.name != ":status" {
			continue
		}
		code, _ := strconv.Atoi(e.value)
		if got, want := AppendStatus(nil, code), []byte{0x80 | byte(i+1)}; !bytes.Equal(got, want) {
			t.Errorf("AppendStatus(%d) = %x, want the indexed field %x", code, got, want)
		}
	}
	d := hpack.NewDecoder(4096, nil)
	for code := 100; code <= 999; code++ {
		block := AppendStatus([]byte{}, code)
		got, _, err := decodeBlock(t, d, block)
		if want := []hf{{":status", strconv.Itoa(code)}}; err != nil || !equalFields(got, want) {
			t.Errorf("AppendStatus(%d) = %x, decodes to %q, %v, want %q", code, block, got, err, want)
		}
	}
}

// TestAppendKeepsPrefix: each Append function appends: what the slice held
// before is left as it was.
func TestAppendKeepsPrefix(t *testing.T) {
	prefix := []byte("prefix")
	for _, tt := range []struct {
		name string
		b    []byte
		want []byte
	}{
		{"AppendInt", AppendInt(bytes.Clone(prefix), 0, 5, 1337), AppendInt(nil, 0, 5, 1337)},
		{"AppendString", AppendString(bytes.Clone(prefix), "abc"), AppendString(nil, "abc")},
		{"AppendField", AppendField(bytes.Clone(prefix), "x-a", "b"), AppendField(nil, "x-a", "b")},
		{"AppendStatus", AppendStatus(bytes.Clone(prefix), 418), AppendStatus(nil, 418)},
		{"AppendFrameHeader", AppendFrameHeader(bytes.Clone(prefix), 5, 1, 4, 3), AppendFrameHeader(nil, 5, 1, 4, 3)},
	} {
		if want := append(bytes.Clone(prefix), tt.want...); !bytes.Equal(tt.b, want) {
			t.Errorf("%s after %q = %q, want %q", tt.name, prefix, tt.b, want)
		}
	}
}

// TestAppendFrameHeader: the 9 octets read back (x/net's http2 frame
// header reader) as the payload length, type, flags and stream id given,
// at the ends of each field's range; the reserved bit of the stream id is
// sent unset (RFC 9113 section 4.1) even when the id given has it.
func TestAppendFrameHeader(t *testing.T) {
	for _, tt := range []struct {
		n      int
		typ    http2.FrameType
		flags  http2.Flags
		id     uint32
		wantID uint32
	}{
		{0, http2.FrameData, 0, 1, 1},
		{16384, http2.FrameHeaders, http2.FlagHeadersEndHeaders | http2.FlagHeadersEndStream, 3, 3},
		{1<<24 - 1, http2.FrameContinuation, http2.FlagContinuationEndHeaders, 1<<31 - 1, 1<<31 - 1},
		{8, http2.FramePing, http2.FlagPingAck, 0, 0},
		{4, http2.FrameWindowUpdate, 0xff, 0x80000005, 5},
		{0x010203, 0xff, 0, 0x01020304, 0x01020304},
	} {
		b := AppendFrameHeader(nil, tt.n, uint8(tt.typ), uint8(tt.flags), tt.id)
		if len(b) != 9 {
			t.Errorf("AppendFrameHeader(%d, %v, %#x, %#x) = %x: %d octets, want 9", tt.n, tt.typ, tt.flags, tt.id, b, len(b))
			continue
		}
		if b[5]&0x80 != 0 {
			t.Errorf("AppendFrameHeader(..., id %#x) = %x: reserved bit set", tt.id, b)
		}
		fh, err := http2.ReadFrameHeader(bytes.NewReader(b))
		if err != nil {
			t.Errorf("AppendFrameHeader(%d, %v, %#x, %#x) = %x: %v", tt.n, tt.typ, tt.flags, tt.id, b, err)
			continue
		}
		if fh.Length != uint32(tt.n) || fh.Type != tt.typ || fh.Flags != tt.flags || fh.StreamID != tt.wantID {
			t.Errorf("AppendFrameHeader(%d, %v, %#x, %#x) reads as length %d type %v flags %#x stream %d, want %d %v %#x %d",
				tt.n, tt.typ, tt.flags, tt.id, fh.Length, fh.Type, fh.Flags, fh.StreamID, tt.n, tt.typ, tt.flags, tt.wantID)
		}
	}
}

// FuzzRoundTrip: any field, after any status, decodes (x/net's HPACK
// decoder) to what was encoded, in order, and touches no dynamic table.
// The seeds cover an indexed :status and a literal one, a name from the
// static table and a new one, empty strings, and strings long enough for
// multi-octet length prefixes.
func FuzzRoundTrip(f *testing.F) {
	f.Add(200, "content-type", "text/plain")
	f.Add(302, "location", "https://www.example.com")
	f.Add(999, "x-custom", "")
	f.Add(100, "", "")
	f.Add(404, "set-cookie", strings.Repeat("v", 127))
	f.Add(500, "x-long", strings.Repeat("v", 255))
	f.Add(599, strings.Repeat("n", 300), strings.Repeat("v", 16500))
	f.Add(204, "x-bytes", "\x00\xff\r\n")
	f.Fuzz(func(t *testing.T, code int, name, value string) {
		if code < 100 || code > 999 {
			code = 100 + (code%900+900)%900 // a three-digit status, as the engines write
		}
		block := AppendField(AppendStatus(nil, code), name, value)
		d := hpack.NewDecoder(4096, nil)
		got, sensitive, err := decodeBlock(t, d, block)
		if err != nil {
			t.Fatalf("decoding %x: %v", block, err)
		}
		if want := []hf{{":status", strconv.Itoa(code)}, {name, value}}; !equalFields(got, want) {
			t.Fatalf("%x decodes to %q, want %q", block, got, want)
		}
		if sensitive {
			t.Fatalf("%x has a never-indexed field, want literals without indexing", block)
		}
		if _, err := d.DecodeFull([]byte{0x80 | 62}); err == nil {
			t.Fatalf("index 62 decodes after %x: the encoder added to the dynamic table", block)
		}
	})
}
