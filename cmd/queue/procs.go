package main

import (
	"bufio"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// A sidecar held to one CPU or less runs with GOMAXPROCS 1.
//
// Since Go 1.25 the runtime takes GOMAXPROCS from the cgroup's CPU limit,
// but never below 2: under Kubernetes' "cpu: 100m" on a node of two CPUs or
// more, queue would run with 2. With two Ps, a goroutine made runnable while
// the other P idles wakes a second thread to look for work (a futex wake-up
// and a spin per request), all of it billed to the same 100m: held to 100m
// under an open-loop load (bench/sidecar.sh), one P costs less CPU a
// request than two, and is throttled less, so its tail latency is lower.
//
// Setting it also ends the runtime's once-a-second re-read of the limit,
// one wake-up a second at rest; a pod resized in place keeps the value it
// started with. GOMAXPROCS in the environment wins, as always.

// cgroupRoot is where the cgroup file systems are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// sidecarProcs sets GOMAXPROCS to 1 when the process's CPU limit is one
// CPU or less and the environment does not set GOMAXPROCS, and returns the
// limit it read (0: none found), the directory of the cgroup it is set in
// and GOMAXPROCS now.
func sidecarProcs(getenv func(string) string) (limit float64, dir string, procs int) {
	limit, dir = cpuLimit(cgroupRoot, "/proc/self/cgroup")
	if getenv("GOMAXPROCS") == "" && limit > 0 && limit <= 1 && runtime.GOMAXPROCS(0) > 1 {
		runtime.GOMAXPROCS(1)
	}
	return limit, dir, runtime.GOMAXPROCS(0)
}

// cpuLimit returns the CPU limit, in CPUs, of the cgroup that selfCgroup
// (a /proc/PID/cgroup file) names, under root: the smallest quota/period
// on the way from the cgroup up to the root, as the runtime reads it; 0
// when there is none or it cannot be read. Both cgroup v2 (cpu.max) and
// v1 (the cpu controller's cpu.cfs_quota_us and cpu.cfs_period_us) count.
// dir is that cgroup's directory, whose cpu.stat counts the periods the
// quota bound in ("" with no limit).
func cpuLimit(root, selfCgroup string) (limit float64, dir string) {
	f, err := os.Open(selfCgroup)
	if err != nil {
		return 0, ""
	}
	defer f.Close()
	lower := func(l float64, d string) {
		if l > 0 && (limit == 0 || l < limit) {
			limit, dir = l, d
		}
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch ctrls := parts[1]; {
		case parts[0] == "0" && ctrls == "":
			walkUp(filepath.Join(root, parts[2]), root, func(d string) {
				lower(readV2(filepath.Join(d, "cpu.max")), d)
			})
		case hasController(ctrls, "cpu"):
			mount := filepath.Join(root, ctrls)
			if _, err := os.Stat(mount); err != nil {
				mount = filepath.Join(root, "cpu")
			}
			walkUp(filepath.Join(mount, parts[2]), mount, func(d string) {
				lower(readV1(d), d)
			})
		}
	}
	return limit, dir
}

func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// walkUp calls f for dir and each parent up to and including top.
func walkUp(dir, top string, f func(string)) {
	for {
		f(dir)
		if dir == top || len(dir) <= len(top) {
			return
		}
		dir = filepath.Dir(dir)
	}
}

// readV2 reads a cpu.max file, "QUOTA PERIOD" or "max PERIOD".
func readV2(name string) float64 {
	b, err := os.ReadFile(name)
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 || f[0] == "max" {
		return 0
	}
	return ratio(f[0], f[1])
}

// readV1 reads a v1 cpu controller directory's quota and period; a quota
// of -1 is none.
func readV1(dir string) float64 {
	q, err1 := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
	p, err2 := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
	if err1 != nil || err2 != nil {
		return 0
	}
	return ratio(strings.TrimSpace(string(q)), strings.TrimSpace(string(p)))
}

func ratio(quota, period string) float64 {
	q, err1 := strconv.ParseInt(quota, 10, 64)
	p, err2 := strconv.ParseInt(period, 10, 64)
	if err1 != nil || err2 != nil || q <= 0 || p <= 0 {
		return 0
	}
	return float64(q) / float64(p)
}
