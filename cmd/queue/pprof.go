package main

import (
	"fmt"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"time"
)

// The profiling endpoints of --pprof, on the admin port, and of
// --pprof-listen, on a port of their own (Knative's :8008). They are written on
// runtime/pprof and runtime/trace directly: net/http/pprof, the usual choice,
// links html/template (for its index page) and internal/profile (for delta
// profiles) into every build of queue, profiling on or off, and adds to
// each idle sidecar's resident memory. The paths and parameters are
// net/http/pprof's, so `go tool pprof http://ADMIN/debug/pprof/heap` and
// the other usual commands work unchanged; what is left out is the HTML
// index (a plain-text one stands in), the legacy /symbol endpoint (Go
// profiles carry their symbols) and delta profiles (?seconds= on a named
// profile: fetch twice and use pprof -base).

// maxProfileSeconds bounds ?seconds= of the CPU profile and the trace.
const maxProfileSeconds = 300

func registerPProf(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/{$}", pprofIndex)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprofCmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprofCPU)
	mux.HandleFunc("GET /debug/pprof/trace", pprofTrace)
	mux.HandleFunc("GET /debug/pprof/{name}", pprofNamed)
}

// pprofIndex lists what can be fetched, one "count<TAB>name" line per
// runtime profile, then the endpoints that take ?seconds=.
func pprofIndex(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	var b strings.Builder
	for _, p := range pprof.Profiles() {
		fmt.Fprintf(&b, "%d\t%s\n", p.Count(), p.Name())
	}
	b.WriteString("-\tprofile (CPU, ?seconds=30)\n-\ttrace (?seconds=1)\n-\tcmdline\n")
	w.Write([]byte(b.String()))
}

func pprofCmdline(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte(strings.Join(os.Args, "\x00")))
}

// seconds reads ?seconds=, def when absent; ok is false (and a 400 sent)
// when it is not a whole number from 1 to maxProfileSeconds.
func seconds(w http.ResponseWriter, r *http.Request, def int) (time.Duration, bool) {
	s := r.URL.Query().Get("seconds")
	if s == "" {
		return time.Duration(def) * time.Second, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxProfileSeconds {
		http.Error(w, fmt.Sprintf("seconds: want a whole number from 1 to %d", maxProfileSeconds), http.StatusBadRequest)
		return 0, false
	}
	return time.Duration(n) * time.Second, true
}

// record runs start, waits d or until the client leaves, then runs stop.
// A second recording while one runs gets 409: the runtime has one CPU
// profiler and one tracer.
func record(w http.ResponseWriter, r *http.Request, d time.Duration, name string, start func() error, stop func()) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`"`)
	if err := start(); err != nil {
		w.Header().Del("Content-Disposition")
		http.Error(w, name+" recording already running", http.StatusConflict)
		return
	}
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-r.Context().Done():
		t.Stop()
	}
	stop()
}

func pprofCPU(w http.ResponseWriter, r *http.Request) {
	d, ok := seconds(w, r, 30)
	if !ok {
		return
	}
	record(w, r, d, "profile", func() error { return pprof.StartCPUProfile(w) }, pprof.StopCPUProfile)
}

func pprofTrace(w http.ResponseWriter, r *http.Request) {
	d, ok := seconds(w, r, 1)
	if !ok {
		return
	}
	record(w, r, d, "trace", func() error { return trace.Start(w) }, trace.Stop)
}

// pprofNamed serves a runtime profile (heap, goroutine, allocs, block,
// mutex, threadcreate): ?debug=N as text, the protobuf otherwise; ?gc=1
// collects garbage first, as net/http/pprof does for heap.
func pprofNamed(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	p := pprof.Lookup(name)
	if p == nil {
		http.Error(w, "unknown profile", http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	if q.Has("seconds") {
		http.Error(w, "delta profiles are not served: fetch twice and use pprof -base", http.StatusBadRequest)
		return
	}
	debug, _ := strconv.Atoi(q.Get("debug"))
	if q.Get("gc") != "" && q.Get("gc") != "0" {
		runtime.GC()
	}
	if debug != 0 {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="`+name+`"`)
	}
	p.WriteTo(w, debug)
}
