// Command sidecar is the Go half of bench/sidecar.sh: it puts processes in
// control groups and reads what the kernel accounted to them, sends the
// kubelet's probes and the autoscaler's scrapes at a fixed rate, times the
// first 200 answer once the upstream comes up, runs vegeta under a CPU
// quota, and prints the table. Figures are written to stdout as
// tab-separated "part peer case figure value" lines, the rows of
// summary.tsv.
//
//	sidecar create -cgroup NAME [-quota-milli 100]
//	sidecar exec -cgroup NAME -- CMD [ARGS...]
//	sidecar remove -cgroup NAME
//	sidecar procs -cgroup NAME
//	sidecar version
//	sidecar idle -cgroup NAME -duration 30s [-probe URL] [-scrape URL] ...
//	sidecar firstok -cgroup NAME -listen ADDR -probe URL -down 30s ...
//	sidecar attack -cgroup NAME -vegeta BIN -url URL -rate 250 ...
//	sidecar table -summary FILE
//
// CPU is the group's usage counter (cgroup v2 cpu.stat usage_usec, v1
// cpuacct.usage) and wake-ups are the voluntary and involuntary context
// switches of every thread of the processes in the group
// (/proc/PID/task/TID/status).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: sidecar create|exec|remove|idle|firstok|attack|table [flags] (see bench/sidecar/main.go)")
		os.Exit(2)
	}
	cmds := map[string]func([]string) error{
		"create": cmdCreate, "exec": cmdExec, "remove": cmdRemove, "version": cmdVersion, "procs": cmdProcs,
		"idle": cmdIdle, "firstok": cmdFirstOK, "attack": cmdAttack, "table": cmdTable,
	}
	run, ok := cmds[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "sidecar: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
	if err := run(os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "sidecar %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// groupFlag adds -cgroup to fs and returns a function that finds the group.
func groupFlag(fs *flag.FlagSet) func() (cgroup, error) {
	name := fs.String("cgroup", "", "the control group's name, under the hierarchy's root")
	return func() (cgroup, error) {
		if *name == "" {
			return cgroup{}, errors.New("-cgroup is required")
		}
		return findCgroup(*name)
	}
}

func cmdCreate(args []string) error {
	fs := flag.NewFlagSet("create", flag.ExitOnError)
	group := groupFlag(fs)
	quota := fs.Int("quota-milli", 0, "limit the group to this many thousandths of a CPU per 100 ms; 0 = no limit")
	fs.Parse(args)
	g, err := group()
	if err != nil {
		return err
	}
	return g.create(*quota)
}

func cmdRemove(args []string) error {
	fs := flag.NewFlagSet("remove", flag.ExitOnError)
	group := groupFlag(fs)
	fs.Parse(args)
	g, err := group()
	if err != nil {
		return err
	}
	return g.remove()
}

// cmdProcs prints the PIDs of the processes in the group, one a line, so
// that the script can stop by PID whatever is left in it.
func cmdProcs(args []string) error {
	fs := flag.NewFlagSet("procs", flag.ExitOnError)
	group := groupFlag(fs)
	fs.Parse(args)
	g, err := group()
	if err != nil {
		return err
	}
	pids, err := g.pids()
	if err != nil {
		return err
	}
	for _, p := range pids {
		fmt.Println(p)
	}
	return nil
}

// cmdVersion prints the cgroup version the benchmark uses ("v1" or "v2").
func cmdVersion(args []string) error {
	g, err := findCgroup("x")
	if err != nil {
		return err
	}
	fmt.Println(g.version())
	return nil
}

// cmdExec moves itself into the group and then becomes the command, so
// that every process and thread of the command is in the group from its
// first instruction.
func cmdExec(args []string) error {
	fs := flag.NewFlagSet("exec", flag.ExitOnError)
	group := groupFlag(fs)
	fs.Parse(args)
	if fs.NArg() == 0 {
		return errors.New("no command")
	}
	g, err := group()
	if err != nil {
		return err
	}
	if err := g.join(0); err != nil {
		return err
	}
	path, err := exec.LookPath(fs.Arg(0))
	if err != nil {
		return fmt.Errorf("find %s: %w", fs.Arg(0), err)
	}
	if err := syscall.Exec(path, fs.Args(), os.Environ()); err != nil {
		return fmt.Errorf("exec %s: %w", path, err)
	}
	return nil
}

// label is what every figure line starts with.
type label struct{ part, peer, kase string }

func labelFlags(fs *flag.FlagSet, part string) *label {
	l := &label{part: part}
	fs.StringVar(&l.peer, "peer", "queue", "the peer measured, for the figure lines")
	fs.StringVar(&l.kase, "case", "", "the case measured (a, b, ... or the rate), for the figure lines")
	return l
}

// emit prints one figure line.
func (l *label) emit(figure string, format string, v ...any) {
	fmt.Printf("%s\t%s\t%s\t%s\t%s\n", l.part, l.peer, l.kase, figure, fmt.Sprintf(format, v...))
}

// sample is the group's counters and its threads' context switches at one instant.
type sample struct {
	u  usage
	sw switches
}

func take(g cgroup) (sample, error) {
	pids, err := g.pids()
	if err != nil {
		return sample{}, err
	}
	sw := readSwitches(pids)
	u, err := g.read()
	if err != nil {
		return sample{}, err
	}
	return sample{u: u, sw: sw}, nil
}

// delta is what happened between two samples.
type delta struct {
	usage
	switches int64
}

func (s sample) since(before sample) delta {
	return delta{usage: s.u.sub(before.u), switches: s.sw.since(before.sw)}
}
