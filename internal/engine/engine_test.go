package engine

import (
	"slices"
	"testing"
)

// Kept is the storage behind Keeper.
var _ Keeper = (*Kept)(nil)

// TestKeptNoHead: a Kept, new or Reset, has no head handed over: Upstream
// is nil and UpstreamLength -1, and KeepHead returns an empty head (Status
// 0); after Reset, its ContentLength is -1 (none came).
func TestKeptNoHead(t *testing.T) {
	var k Kept
	if up := k.Upstream(); up != nil {
		t.Errorf("new Kept: Upstream() = %+v, want nil", up)
	}
	if got := k.UpstreamLength(); got != -1 {
		t.Errorf("new Kept: UpstreamLength() = %d, want -1", got)
	}
	if h := k.KeepHead(); h.Status != 0 || len(h.Fields) != 0 || h.Date {
		t.Errorf("new Kept: KeepHead() = %+v, want an empty head", h)
	}
	k.Reset()
	if h := k.KeepHead(); h.Status != 0 || len(h.Fields) != 0 || h.Date || h.ContentLength != -1 {
		t.Errorf("after Reset: KeepHead() = %+v, want an empty head, ContentLength -1", h)
	}
	if up, n := k.Upstream(), k.UpstreamLength(); up != nil || n != -1 {
		t.Errorf("after Reset: Upstream() = %+v, UpstreamLength() = %d, want nil, -1", up, n)
	}
}

// TestKeptHandOver: a head filled through KeepHead is not handed over
// until its Status is set; then Upstream returns that head and
// UpstreamLength its ContentLength (-1 when none came). Reset takes it
// back.
func TestKeptHandOver(t *testing.T) {
	var k Kept
	k.Reset()
	h := k.KeepHead()
	h.Fields = append(h.Fields, Field{"Content-Type", "text/plain"}, Field{"Date", "Mon, 21 Oct 2013 20:13:21 GMT"})
	h.ContentLength, h.Date = 42, true
	if up, n := k.Upstream(), k.UpstreamLength(); up != nil || n != -1 {
		t.Errorf("before Status is set: Upstream() = %+v, UpstreamLength() = %d, want nil, -1", up, n)
	}
	h.Status = 200
	if up := k.Upstream(); up != h {
		t.Errorf("Upstream() = %p, want the head KeepHead returned (%p)", up, h)
	}
	if got := k.UpstreamLength(); got != 42 {
		t.Errorf("UpstreamLength() = %d, want 42", got)
	}
	h.ContentLength = -1
	if got := k.UpstreamLength(); got != -1 {
		t.Errorf("head without a length: UpstreamLength() = %d, want -1", got)
	}
	k.Reset()
	if up, n := k.Upstream(), k.UpstreamLength(); up != nil || n != -1 {
		t.Errorf("after Reset: Upstream() = %+v, UpstreamLength() = %d, want nil, -1", up, n)
	}
}

// TestResponseHeadReset: Reset empties a head for a new response and keeps
// the storage of Fields, with no string left reachable from it; Status 0,
// ContentLength -1, Date false.
func TestResponseHeadReset(t *testing.T) {
	h := ResponseHead{Status: 200, ContentLength: 5, Date: true}
	h.Fields = append(make([]Field, 0, 8), Field{"A", "1"}, Field{"B", "2"}, Field{"C", "3"})
	storage := &h.Fields[:1][0]
	h.Reset()
	if h.Status != 0 || h.ContentLength != -1 || h.Date || len(h.Fields) != 0 {
		t.Errorf("after Reset: %+v, want Status 0, ContentLength -1, Date false, no Fields", h)
	}
	if cap(h.Fields) != 8 || &h.Fields[:1][0] != storage {
		t.Errorf("after Reset: Fields' storage was not kept (cap %d, want 8)", cap(h.Fields))
	}
	for i, f := range h.Fields[:cap(h.Fields)] {
		if f != (Field{}) {
			t.Errorf("after Reset: storage [%d] still holds %+v", i, f)
		}
	}
}

// TestKeepBuffer: KeepBuffer returns n bytes, for any n, growing as
// needed; what the handler wrote there stays as it was while the response
// goes on, whatever else of the Kept it uses.
func TestKeepBuffer(t *testing.T) {
	var k Kept
	for _, n := range []int{0, 1, 16, 4096, 10, 1 << 16} {
		if b := k.KeepBuffer(n); len(b) != n {
			t.Errorf("KeepBuffer(%d): %d bytes", n, len(b))
		}
	}
	b := k.KeepBuffer(64)
	copy(b, "content-type: text/plain")
	h := k.KeepHead()
	h.Fields = append(h.Fields, Field{"Content-Type", string(b[14:24])})
	h.Status = 200
	*k.KeepValues() = append(*k.KeepValues(), "x")
	*k.ConnCache() = append(*k.ConnCache(), "y"...)
	_, _ = k.Upstream(), k.UpstreamLength()
	if got := string(b[:24]); got != "content-type: text/plain" {
		t.Errorf("KeepBuffer's bytes changed to %q while the response went on", got)
	}
}

// TestKeepValuesAndConnCache: KeepValues returns the same scratch space on
// every call, emptied by Reset with its storage kept; ConnCache's bytes
// are kept across Reset, for the connection's next responses.
func TestKeepValuesAndConnCache(t *testing.T) {
	var k Kept
	vals := k.KeepValues()
	*vals = append(*vals, "a", "b")
	if again := k.KeepValues(); again != vals || !slices.Equal(*again, []string{"a", "b"}) {
		t.Errorf("second KeepValues() = %p %q, want %p [a b]", again, *again, vals)
	}
	cc := k.ConnCache()
	*cc = append(*cc, "for=192.0.2.1"...)
	k.Reset()
	if got := k.KeepValues(); got != vals || len(*got) != 0 || cap(*got) < 2 {
		t.Errorf("after Reset: KeepValues() = %p len %d cap %d, want %p, empty, its storage kept", got, len(*got), cap(*got), vals)
	}
	if got := k.ConnCache(); got != cc || string(*got) != "for=192.0.2.1" {
		t.Errorf("after Reset: ConnCache() = %p %q, want %p %q", got, *got, cc, "for=192.0.2.1")
	}
}
