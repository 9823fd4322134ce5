package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// cgroup is one control group of the benchmark, in cgroup v2 or in the v1
// cpu and cpuacct hierarchies (the same folder when they are mounted
// together).
type cgroup struct {
	v2     bool
	cpu    string // v2: the group's folder; v1: its folder in the cpu hierarchy
	cpuacc string // v1: its folder in the cpuacct hierarchy; v2: same as cpu
}

// mounts says where the cgroup file systems that matter here are mounted.
type mounts struct {
	v1cpu, v1cpuacct string // v1 hierarchies with the cpu and cpuacct controllers
	v2               string // the cgroup2 mount
}

// parseMountinfo finds the cgroup mounts in the text of /proc/self/mountinfo.
func parseMountinfo(r io.Reader) (mounts, error) {
	var m mounts
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+3 >= len(fields) {
			continue
		}
		point, fstype := fields[4], fields[sep+1]
		switch fstype {
		case "cgroup2":
			if m.v2 == "" {
				m.v2 = point
			}
		case "cgroup":
			// The controllers are among the super options.
			opts := "," + fields[sep+3] + ","
			if strings.Contains(opts, ",cpu,") && m.v1cpu == "" {
				m.v1cpu = point
			}
			if strings.Contains(opts, ",cpuacct,") && m.v1cpuacct == "" {
				m.v1cpuacct = point
			}
		}
	}
	if err := sc.Err(); err != nil {
		return m, fmt.Errorf("read mountinfo: %w", err)
	}
	return m, nil
}

// findCgroup says where the group called name lives (whether it exists or
// not): cgroup v1 when its cpu and cpuacct controllers are mounted, else
// cgroup v2 when its root offers the cpu controller.
func findCgroup(name string) (cgroup, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return cgroup{}, fmt.Errorf("open mountinfo: %w", err)
	}
	defer f.Close()
	m, err := parseMountinfo(f)
	if err != nil {
		return cgroup{}, err
	}
	if m.v1cpu != "" && m.v1cpuacct != "" {
		return cgroup{cpu: filepath.Join(m.v1cpu, name), cpuacc: filepath.Join(m.v1cpuacct, name)}, nil
	}
	if m.v2 != "" {
		ctl, err := os.ReadFile(filepath.Join(m.v2, "cgroup.controllers"))
		if err == nil && hasWord(string(ctl), "cpu") {
			dir := filepath.Join(m.v2, name)
			return cgroup{v2: true, cpu: dir, cpuacc: dir}, nil
		}
	}
	return cgroup{}, errors.New("find cgroup: neither cgroup v1 cpu and cpuacct nor cgroup v2 with the cpu controller is mounted")
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

// version is "v1" or "v2".
func (c cgroup) version() string {
	if c.v2 {
		return "v2"
	}
	return "v1"
}

// create makes the group; quotaMilli > 0 limits it to that many thousandths
// of one CPU per 100 ms period, 0 leaves it unlimited.
func (c cgroup) create(quotaMilli int) error {
	if c.v2 {
		// The cpu controller must be on in the parent for the group to have cpu.max.
		ctl := filepath.Join(filepath.Dir(c.cpu), "cgroup.subtree_control")
		if b, err := os.ReadFile(ctl); err == nil && !hasWord(string(b), "cpu") {
			if err := os.WriteFile(ctl, []byte("+cpu"), 0); err != nil {
				return fmt.Errorf("enable the cpu controller in %s: %w", ctl, err)
			}
		}
	}
	for _, d := range c.dirs() {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create cgroup: %w", err)
		}
	}
	if quotaMilli <= 0 {
		return nil
	}
	quota := quotaMilli * 100 // µs per 100 000 µs period
	if c.v2 {
		return writeFile(filepath.Join(c.cpu, "cpu.max"), fmt.Sprintf("%d 100000", quota))
	}
	if err := writeFile(filepath.Join(c.cpu, "cpu.cfs_period_us"), "100000"); err != nil {
		return err
	}
	return writeFile(filepath.Join(c.cpu, "cpu.cfs_quota_us"), strconv.Itoa(quota))
}

func writeFile(path, s string) error {
	if err := os.WriteFile(path, []byte(s), 0); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// dirs is the group's folders, one per hierarchy.
func (c cgroup) dirs() []string {
	if c.cpu == c.cpuacc {
		return []string{c.cpu}
	}
	return []string{c.cpu, c.cpuacc}
}

// join moves process pid (0: this one) into the group.
func (c cgroup) join(pid int) error {
	if pid == 0 {
		pid = os.Getpid()
	}
	for _, d := range c.dirs() {
		if err := writeFile(filepath.Join(d, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("join cgroup: %w", err)
		}
	}
	return nil
}

// remove deletes the group's folders, waiting up to 5 s for the processes
// in it to be gone.
func (c cgroup) remove() error {
	var last error
	for _, d := range c.dirs() {
		for i := 0; i < 50; i++ {
			last = os.Remove(d)
			if last == nil || errors.Is(last, os.ErrNotExist) {
				last = nil
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if last != nil {
			return fmt.Errorf("remove cgroup: %w", last)
		}
	}
	return nil
}

// usage is what the kernel has accounted to the group so far.
type usage struct {
	cpuNanos  int64 // CPU time of every task in the group
	periods   int64 // enforcement periods with runnable tasks
	throttled int64 // periods in which the group ran out of quota
}

// read reads the group's counters.
func (c cgroup) read() (usage, error) {
	var u usage
	stat, err := os.ReadFile(filepath.Join(c.cpu, "cpu.stat"))
	if err != nil {
		return u, fmt.Errorf("read cpu.stat: %w", err)
	}
	kv := parseKV(string(stat))
	u.periods, u.throttled = kv["nr_periods"], kv["nr_throttled"]
	if c.v2 {
		u.cpuNanos = kv["usage_usec"] * 1000
		return u, nil
	}
	b, err := os.ReadFile(filepath.Join(c.cpuacc, "cpuacct.usage"))
	if err != nil {
		return u, fmt.Errorf("read cpuacct.usage: %w", err)
	}
	u.cpuNanos, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return u, fmt.Errorf("parse cpuacct.usage: %w", err)
	}
	return u, nil
}

// sub is u minus an earlier reading.
func (u usage) sub(before usage) usage {
	return usage{u.cpuNanos - before.cpuNanos, u.periods - before.periods, u.throttled - before.throttled}
}

// parseKV parses "key value" lines, such as cpu.stat's; lines that do not
// end in an integer are left out.
func parseKV(s string) map[string]int64 {
	m := make(map[string]int64)
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
			m[f[0]] = n
		}
	}
	return m
}

// pids lists the processes in the group.
func (c cgroup) pids() ([]int, error) {
	b, err := os.ReadFile(filepath.Join(c.cpu, "cgroup.procs"))
	if err != nil {
		return nil, fmt.Errorf("read cgroup.procs: %w", err)
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out, nil
}
