package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestReadOnlyExeMappings: only private, read-only mappings of the given
// file are taken, with their resident and privately copied sizes.
func TestReadOnlyExeMappings(t *testing.T) {
	t.Parallel()
	const smaps = `00400000-0090f000 r-xp 00000000 fd:01 1234                               /usr/bin/queue
Size:               5180 kB
Rss:                4444 kB
Anonymous:             0 kB
0090f000-00e74000 r--p 0050f000 fd:01 1234                               /usr/bin/queue
Size:               5524 kB
Rss:                4352 kB
Anonymous:             8 kB
00e74000-00ede000 rw-p 00a74000 fd:01 1234                               /usr/bin/queue
Rss:                 248 kB
Anonymous:           100 kB
00ede000-02f22000 rw-p 00000000 00:00 0
Rss:                  96 kB
7f0000000000-7f0000010000 r--p 00000000 fd:01 99                         /usr/lib/other.so
Rss:                  64 kB
Anonymous:             0 kB
7f0000010000-7f0000020000 r--s 00000000 fd:01 1234                       /usr/bin/queue
Rss:                  64 kB
7f0000020000-7f0000030000 r--p 00000000 fd:02 1234                       /other/fs/same-inode
Rss:                  64 kB
`
	path := filepath.Join(t.TempDir(), "smaps")
	if err := os.WriteFile(path, []byte(smaps), 0o600); err != nil {
		t.Fatal(err)
	}
	dev, ok := parseDev([]byte("fd:01"))
	if !ok {
		t.Fatal("parseDev(fd:01) failed")
	}
	got, err := readOnlyExeMappings(path, dev, 1234)
	if err != nil {
		t.Fatal(err)
	}
	want := []mapping{
		{start: 0x400000, end: 0x90f000, rss: 4444 << 10},
		{start: 0x90f000, end: 0xe74000, rss: 4352 << 10, anon: 8 << 10},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d mappings %+v, want %+v", len(got), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("mapping %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestParseDev: smaps' major:minor (hex) becomes stat's st_dev.
func TestParseDev(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want uint64 // glibc's makedev(major, minor)
	}{{"fd:01", 0xfd01}, {"00:1f", 0x1f}, {"103:1a5", 0x1103a5}}
	for _, c := range cases {
		if got, ok := parseDev([]byte(c.in)); !ok || got != c.want {
			t.Errorf("parseDev(%q) = %#x, %v; want %#x", c.in, got, ok, c.want)
		}
	}
	for _, bad := range []string{"", "fd", "fd:", "zz:01", ":01"} {
		if _, ok := parseDev([]byte(bad)); ok {
			t.Errorf("parseDev(%q) accepted", bad)
		}
	}
}

// TestReleaseStartupPages: in this very process, the executable's
// read-only mappings are found and unmapped, and the process goes on
// running from the pages it faults back in.
func TestReleaseStartupPages(t *testing.T) {
	var exe syscall.Stat_t
	if err := syscall.Stat("/proc/self/exe", &exe); err != nil {
		t.Fatal(err)
	}
	resident := func() (rss int64, n int) {
		maps, err := readOnlyExeMappings("/proc/self/smaps", exe.Dev, exe.Ino)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range maps {
			if m.anon == 0 {
				rss += m.rss
				n++
			}
		}
		return rss, n
	}
	before, n := resident()
	if n == 0 || before == 0 {
		t.Fatalf("no resident read-only mapping of the test binary found (%d mappings, %d bytes)", n, before)
	}
	released, err := releaseStartupPages()
	if err != nil {
		t.Fatal(err)
	}
	after, _ := resident()
	t.Logf("resident read-only pages: %d KiB before, %d KiB released, %d KiB after", before>>10, released>>10, after>>10)
	// released is what this call found resident. In-process servers of
	// other tests release the same pages when their upstream is first
	// ready: one may have done so between the two readings (released is
	// then less than before), or before the first (before is then what
	// the process faulted back in since, and released may be more). So
	// what is left is compared with the larger of the two.
	if released == 0 {
		t.Errorf("released nothing of %d resident", before)
	}
	if most := max(before, released); after >= most/2 {
		t.Errorf("resident after release %d bytes, want under half of %d (before %d, released %d)", after, most, before, released)
	}
}
