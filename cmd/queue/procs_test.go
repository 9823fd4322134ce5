package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCPULimit: the CPU limit is read from cgroup v2's cpu.max or v1's
// quota and period, the smallest on the way up to the root, and is 0 when
// there is none.
func TestCPULimit(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		self  string
		files map[string]string // path under the root: content
		want  float64
	}{
		{name: "v2 100m", self: "0::/kubepods/pod1/c1\n",
			files: map[string]string{"kubepods/pod1/c1/cpu.max": "10000 100000\n"}, want: 0.1},
		{name: "v2 namespaced", self: "0::/\n",
			files: map[string]string{"cpu.max": "50000 100000\n"}, want: 0.5},
		{name: "v2 no limit", self: "0::/a\n",
			files: map[string]string{"a/cpu.max": "max 100000\n"}, want: 0},
		{name: "v2 parent lower", self: "0::/pod/c\n",
			files: map[string]string{"pod/c/cpu.max": "200000 100000\n", "pod/cpu.max": "150000 100000\n"}, want: 1.5},
		{name: "v1", self: "12:pids:/x\n4:cpu,cpuacct:/kubepods/p/c\n",
			files: map[string]string{
				"cpu,cpuacct/kubepods/p/c/cpu.cfs_quota_us":  "20000\n",
				"cpu,cpuacct/kubepods/p/c/cpu.cfs_period_us": "100000\n",
			}, want: 0.2},
		{name: "v1 no quota", self: "4:cpu,cpuacct:/c\n",
			files: map[string]string{
				"cpu,cpuacct/c/cpu.cfs_quota_us":  "-1\n",
				"cpu,cpuacct/c/cpu.cfs_period_us": "100000\n",
			}, want: 0},
		{name: "v1 cpu mount", self: "3:cpuacct,cpu:/c\n",
			files: map[string]string{
				"cpu/c/cpu.cfs_quota_us":  "300000\n",
				"cpu/c/cpu.cfs_period_us": "100000\n",
			}, want: 3},
		{name: "nothing", self: "", want: 0},
		{name: "garbage", self: "0::/g\n", files: map[string]string{"g/cpu.max": "lots\n"}, want: 0},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			root := filepath.Join(dir, "cgroup")
			for name, content := range tt.files {
				p := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			self := filepath.Join(dir, "self-cgroup")
			if err := os.WriteFile(self, []byte(tt.self), 0o644); err != nil {
				t.Fatal(err)
			}
			if got, _ := cpuLimit(root, self); got != tt.want {
				t.Errorf("cpuLimit = %v, want %v", got, tt.want)
			}
		})
	}
	if got, _ := cpuLimit(t.TempDir(), "/nonexistent/cgroup"); got != 0 {
		t.Errorf("unreadable: %v, want 0", got)
	}
}
