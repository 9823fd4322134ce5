package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// switches maps a thread id to its voluntary plus involuntary context
// switches so far.
type switches map[int]int64

// parseSwitches reads the two context-switch counters of a
// /proc/PID/task/TID/status file.
func parseSwitches(r io.Reader) (int64, error) {
	var n int64
	seen := 0
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "voluntary_ctxt_switches" && k != "nonvoluntary_ctxt_switches") {
			continue
		}
		x, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse %s: %w", k, err)
		}
		n += x
		seen++
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read status: %w", err)
	}
	if seen != 2 {
		return 0, fmt.Errorf("read status: %d of 2 context-switch counters", seen)
	}
	return n, nil
}

// readSwitches reads the counters of every thread of the processes pids.
// A process or thread that ends while it reads is left out.
func readSwitches(pids []int) switches {
	s := make(switches)
	for _, pid := range pids {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
		for _, t := range tasks {
			tid, err := strconv.Atoi(filepath.Base(filepath.Dir(t)))
			if err != nil {
				continue
			}
			f, err := os.Open(t)
			if err != nil {
				continue
			}
			n, err := parseSwitches(f)
			f.Close()
			if err == nil {
				s[tid] = n
			}
		}
	}
	return s
}

// since is the context switches made between before and s: a thread that
// was not there before counts from 0, and one that has ended since is lost
// (the kernel keeps no per-thread count of it).
func (s switches) since(before switches) int64 {
	var d int64
	for tid, n := range s {
		d += n - before[tid]
	}
	return d
}
