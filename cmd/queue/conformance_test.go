package main

// Conformance tests against third-party peers:
//
//   - TestH2Spec runs h2spec (github.com/summerwind/h2spec, pinned by the
//     tool directive in go.mod) against the h2c and the TLS serving ports,
//     and wants every one of its cases passed on both.
//   - TestGRPCInterop runs gRPC's interop test cases through queue to
//     grpc-go's interop client and server processes.

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/queue-dev/queue/internal/testnet"
)

// h2specCases is how many cases h2spec v2.2.1 runs without --strict.
const h2specCases = 145

// junitSuites is the part of h2spec's JUnit report that TestH2Spec reads.
type junitSuites struct {
	Suites []struct {
		Package string `xml:"package,attr"` // the group's id, "http2/3.5"
		Cases   []struct {
			Desc    string  `xml:"classname,attr"`
			Failure *string `xml:"failure"`
			Error   *string `xml:"error"` // h2spec reports its failures as <error>
			Skipped *string `xml:"skipped"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// h2specResult is one case of an h2spec run.
type h2specResult struct {
	id, desc, message string
	failed, skipped   bool
}

// readH2SpecReport parses h2spec's JUnit report. A case's id is its group's
// id and its place in the group, as h2spec numbers it.
func readH2SpecReport(path string) ([]h2specResult, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r junitSuites
	if err := xml.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	var out []h2specResult
	for _, s := range r.Suites {
		for i, c := range s.Cases {
			res := h2specResult{id: fmt.Sprintf("%s/%d", s.Package, i+1), desc: c.Desc}
			switch {
			case c.Failure != nil:
				res.failed, res.message = true, *c.Failure
			case c.Error != nil:
				res.failed, res.message = true, *c.Error
			case c.Skipped != nil:
				res.skipped = true
			}
			out = append(out, res)
		}
	}
	return out, nil
}

// h2specMessage formats a failure's report, whose lines are what h2spec
// expected and, last, what it got.
func h2specMessage(report string) string {
	lines := strings.Split(strings.TrimSpace(report), "\n")
	if len(lines) < 2 {
		return report
	}
	return fmt.Sprintf("expected %s; got %s", strings.Join(lines[:len(lines)-1], " or "), lines[len(lines)-1])
}

// TestH2Spec: h2spec's every case passes, none skipped, against the h2c
// and the TLS serving ports.
func TestH2Spec(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs h2spec")
	}
	t.Parallel()
	up := h1Upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "hello from the upstream") // over 5 bytes: h2spec 6.9.2/2 needs a body it can hold back by flow control
	}))
	q := startTLSQueue(t, hostPort(up))
	tests := []struct {
		name string
		addr string
		args []string
	}{
		{name: "h2c", addr: q.addr.Listen},
		{name: "tls", addr: q.addr.TLS, args: []string{"-t", "-k"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			host, port, err := net.SplitHostPort(tt.addr)
			if err != nil {
				t.Fatal(err)
			}
			report := filepath.Join(t.TempDir(), "h2spec.xml")
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
			defer cancel()
			args := append([]string{"tool", "h2spec", "-h", host, "-p", port, "-j", report, "--timeout", "5"}, tt.args...)
			cmd := exec.CommandContext(ctx, "go", args...)
			cmd.Dir = "../.." // the module root, whose go.mod pins h2spec
			// Once ctx kills go, do not wait on the pipe h2spec, its child,
			// still holds.
			cmd.WaitDelay = time.Second
			out, err := cmd.CombinedOutput()
			// h2spec exits 1 when a case fails; the report says which.
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) || ctx.Err() != nil {
				t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			results, rerr := readH2SpecReport(report)
			if rerr != nil {
				t.Fatalf("h2spec report: %v (go tool h2spec: %v)\n%s", rerr, err, out)
			}
			var passed, failed, skipped int
			unexpected := false
			for _, r := range results {
				switch {
				case r.failed:
					failed++
					unexpected = true
					t.Errorf("FAIL %s %s: %s", r.id, r.desc, h2specMessage(r.message))
				case r.skipped:
					skipped++
					t.Logf("skipped %s %s", r.id, r.desc)
				default:
					passed++
				}
			}
			t.Logf("h2spec %s: %d passed, %d failed, %d skipped, %d total", tt.name, passed, failed, skipped, len(results))
			if passed != h2specCases || len(results) != h2specCases {
				unexpected = true
				t.Errorf("h2spec %s: %d of %d cases passed, want all %d", tt.name, passed, len(results), h2specCases)
			}
			if skipped > 0 {
				unexpected = true
				t.Errorf("h2spec skipped %d cases: a skipped case is not a pass", skipped)
			}
			if unexpected {
				t.Logf("h2spec output:\n%s", out)
			}
		})
	}
}

// interopCases are the cases of gRPC's interop client that need no cloud
// credentials, no xDS and no ORCA setup: all 16 that grpc-go's client has
// (doc/interop-test-descriptions.md in grpc/grpc).
var interopCases = []string{
	"empty_unary", "large_unary", "client_streaming", "server_streaming", "ping_pong",
	"empty_stream", "timeout_on_sleeping_server", "cancel_after_begin",
	"cancel_after_first_response", "status_code_and_message", "special_status_message",
	"custom_metadata", "unimplemented_method", "unimplemented_service", "rpc_soak", "channel_soak",
	// grpc-go's client does not implement the *_compressed_* cases.
}

// TestGRPCInterop runs gRPC's own interop server (h2c, as the upstream) and
// its interop client, each case as a process, through queue with an h2c
// upstream. Both are grpc-go's, pinned by the tool directive in go.mod and
// run with "go tool"; a case passes when the client exits 0.
func TestGRPCInterop(t *testing.T) {
	t.Parallel()
	const (
		server = "google.golang.org/grpc/interop/server"
		client = "google.golang.org/grpc/interop/client"
	)
	// Build both once, so that the cases below do not race to build them.
	bin := t.TempDir()
	for _, tool := range []string{server, client} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, filepath.Base(tool)), tool)
		cmd.Dir = "../.."
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := runCmd(t, cmd, 5*time.Minute); err != nil {
			t.Fatalf("build %s: %v\n%s", tool, err, out.String())
		}
	}
	upAddr := freeAddr(t)
	_, port, _ := net.SplitHostPort(upAddr)
	srv := exec.Command(filepath.Join(bin, "server"), "--port="+port)
	var srvOut testnet.SyncBuffer
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })

	q := startQueue(t, upAddr, "--upstream-protocol", "h2c")
	q.waitReady(t, true)
	_, qport, _ := net.SplitHostPort(q.addr.Listen)

	passed := 0
	for _, tc := range interopCases {
		t.Run(tc, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(bin, "client"), "--server_host=127.0.0.1",
				"--server_port="+qport, "--test_case="+tc, "--soak_iterations=10")
			cmd.WaitDelay = time.Second
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("interop client: %v\n%s\nserver:\n%s", err, out, srvOut.String())
			}
			passed++
		})
	}
	t.Logf("gRPC interop: %d of %d cases passed", passed, len(interopCases))
}
