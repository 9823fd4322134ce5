package main

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// Start-up pages.
//
// An idle queue's resident memory is mostly its own binary: at rest, a
// small part is anonymous (heap, stacks), the rest are pages of the
// executable's code and read-only data. Package initialisation, flag and
// environment parsing, certificate loading and the first log line run code
// spread over the whole text, and the GC's stack maps and the runtime's
// function table are read from all over the read-only data; on every such
// page fault the kernel maps the 64 KiB around it as well (fault-around), so
// that start-up leaves most of the binary mapped for the life of the pod,
// most of it code that never runs again.
//
// Once it serves, queue unmaps its read-only segments (madvise
// MADV_DONTNEED), as a kernel frees its init sections after boot: the pages
// stay in the page cache, shared with every other queue on the node, and
// what runs again faults back in from there (minor faults, a few hundred
// for the first request). Idle RSS then counts the code a serving sidecar
// uses, and the rest becomes ordinary page cache, which a memory-pressed
// node reclaims first. A mapping with a private copy of any page (a
// relocated segment of a position-independent build) is left alone, since
// dropping it would lose the copy.

// releaseStartupPages unmaps the executable's read-only, unmodified
// mappings and returns how many bytes were resident in them.
func releaseStartupPages() (int64, error) {
	var exe syscall.Stat_t
	if err := syscall.Stat("/proc/self/exe", &exe); err != nil {
		return 0, err
	}
	maps, err := readOnlyExeMappings("/proc/self/smaps", exe.Dev, exe.Ino)
	if err != nil {
		return 0, err
	}
	var released int64
	for _, m := range maps {
		if m.anon != 0 {
			continue
		}
		if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, uintptr(m.start), uintptr(m.end-m.start), syscall.MADV_DONTNEED); e != 0 {
			return released, e
		}
		released += m.rss
	}
	return released, nil
}

// mapping is one line of /proc/PID/smaps with the two sizes we read.
type mapping struct {
	start, end uint64
	rss, anon  int64 // bytes resident; bytes privately copied
}

// readOnlyExeMappings returns the mappings in an smaps file that map the
// file dev/ino privately without write permission.
func readOnlyExeMappings(path string, dev, ino uint64) ([]mapping, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mapping
	var cur *mapping
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Bytes()
		fields := bytes.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if k := fields[0]; k[len(k)-1] == ':' { // "Rss:      4444 kB"
			if cur == nil || len(fields) < 2 {
				continue
			}
			n, _ := strconv.ParseInt(string(fields[1]), 10, 64)
			switch string(k) {
			case "Rss:":
				cur.rss = n << 10
			case "Anonymous:":
				cur.anon = n << 10
			}
			continue
		}
		// "00400000-0090f000 r-xp 00000000 fd:01 1234 /path"
		cur = nil
		if len(fields) < 5 {
			continue
		}
		perms := fields[1]
		if len(perms) != 4 || perms[0] != 'r' || perms[1] != '-' || perms[3] != 'p' {
			continue
		}
		if i, err := strconv.ParseUint(string(fields[4]), 10, 64); err != nil || i != ino {
			continue
		}
		if d, ok := parseDev(fields[3]); !ok || d != dev {
			continue
		}
		lo, hi, ok := bytes.Cut(fields[0], []byte{'-'})
		if !ok {
			continue
		}
		s, err1 := strconv.ParseUint(string(lo), 16, 64)
		e, err2 := strconv.ParseUint(string(hi), 16, 64)
		if err1 != nil || err2 != nil || e <= s {
			continue
		}
		out = append(out, mapping{start: s, end: e})
		cur = &out[len(out)-1]
	}
	return out, sc.Err()
}

// parseDev turns smaps' "major:minor" (hex) into the st_dev encoding that
// stat returns (glibc's makedev).
func parseDev(b []byte) (uint64, bool) {
	ma, mi, ok := bytes.Cut(b, []byte{':'})
	if !ok {
		return 0, false
	}
	major, err1 := strconv.ParseUint(string(ma), 16, 32)
	minor, err2 := strconv.ParseUint(string(mi), 16, 32)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return (major&0xfff)<<8 | (major&^0xfff)<<32 | (minor & 0xff) | (minor&^0xff)<<12, true
}
