package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2conn is a raw HTTP/2 client connection on x/net's Framer, for the
// clients net/http's cannot play: one that reads slowly by holding back
// WINDOW_UPDATEs, and one that vanishes with streams open. It is used by
// one goroutine.
type h2conn struct {
	c      net.Conn
	fr     *http2.Framer
	enc    *hpack.Encoder
	hbuf   bytes.Buffer
	scheme string
	next   uint32 // the next stream id
}

// dialH2 connects to addr with prior knowledge (tlsCfg nil) or over TLS
// with ALPN h2, and sends the preface and SETTINGS; window, when not 0, is
// the initial stream window it announces. deadline bounds the whole
// connection.
func dialH2(ctx context.Context, addr string, tlsCfg *tls.Config, window uint32, deadline time.Time) (*h2conn, error) {
	c, err := dial(ctx, addr, tlsCfg, 0)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(deadline)
	h := &h2conn{c: c, fr: http2.NewFramer(c, c), scheme: "http", next: 1}
	if tlsCfg != nil {
		h.scheme = "https"
		if p := c.(*tls.Conn).ConnectionState().NegotiatedProtocol; p != "h2" {
			c.Close()
			return nil, fmt.Errorf("ALPN chose %q, want h2", p)
		}
	}
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	h.enc = hpack.NewEncoder(&h.hbuf)
	var settings []http2.Setting
	if window != 0 {
		settings = append(settings, http2.Setting{ID: http2.SettingInitialWindowSize, Val: window})
	}
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		c.Close()
		return nil, fmt.Errorf("write preface: %w", err)
	}
	if err := h.fr.WriteSettings(settings...); err != nil {
		c.Close()
		return nil, fmt.Errorf("write settings: %w", err)
	}
	return h, nil
}

// dial opens a TCP connection, over TLS when tlsCfg is not nil, with a
// receive buffer of rcvbuf bytes when not 0 (set before the connection
// exists, so the kernel does not grow it).
func dial(ctx context.Context, addr string, tlsCfg *tls.Config, rcvbuf int) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	if rcvbuf > 0 {
		d.Control = func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf)
			})
			return errors.Join(err, serr)
		}
	}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	if tlsCfg == nil {
		return c, nil
	}
	tc := tls.Client(c, tlsCfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
	}
	return tc, nil
}

// open starts a stream: a HEADERS frame, then body in one DATA frame when
// body is not nil. end ends the stream with the last frame written.
func (h *h2conn) open(method, path string, body []byte, end bool) (uint32, error) {
	id := h.next
	h.next += 2
	h.hbuf.Reset()
	h.enc.WriteField(hpack.HeaderField{Name: ":method", Value: method})
	h.enc.WriteField(hpack.HeaderField{Name: ":scheme", Value: h.scheme})
	h.enc.WriteField(hpack.HeaderField{Name: ":authority", Value: "soak"})
	h.enc.WriteField(hpack.HeaderField{Name: ":path", Value: path})
	if body != nil && end {
		h.enc.WriteField(hpack.HeaderField{Name: "content-length", Value: strconv.Itoa(len(body))})
	}
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{
		StreamID:      id,
		BlockFragment: h.hbuf.Bytes(),
		EndStream:     end && body == nil,
		EndHeaders:    true,
	}); err != nil {
		return 0, fmt.Errorf("write HEADERS: %w", err)
	}
	if body != nil {
		if err := h.fr.WriteData(id, end, body); err != nil {
			return 0, fmt.Errorf("write DATA: %w", err)
		}
	}
	return id, nil
}

// read reads frames and hands each stream frame (HEADERS, DATA, RST_STREAM)
// to f until f reports done. It answers SETTINGS and PING itself, and a
// GOAWAY is an error.
func (h *h2conn) read(f func(http2.Frame) (done bool, err error)) error {
	for {
		fr, err := h.fr.ReadFrame()
		if err != nil {
			return fmt.Errorf("read frame: %w", err)
		}
		switch fr := fr.(type) {
		case *http2.SettingsFrame:
			if !fr.IsAck() {
				if err := h.fr.WriteSettingsAck(); err != nil {
					return fmt.Errorf("write SETTINGS ack: %w", err)
				}
			}
			continue
		case *http2.PingFrame:
			if !fr.IsAck() {
				if err := h.fr.WritePing(true, fr.Data); err != nil {
					return fmt.Errorf("write PING ack: %w", err)
				}
			}
			continue
		case *http2.WindowUpdateFrame:
			continue
		case *http2.GoAwayFrame:
			return fmt.Errorf("GOAWAY %v", fr.ErrCode)
		}
		done, err := f(fr)
		if err != nil || done {
			return err
		}
	}
}

// status checks a response HEADERS frame for :status 200.
func status200(fr *http2.MetaHeadersFrame) error {
	if s := fr.PseudoValue("status"); s != "200" {
		return fmt.Errorf("stream %d: status %s", fr.StreamID, s)
	}
	return nil
}

// vanish closes the connection: with reset, a TCP RST (SO_LINGER 0) rather
// than a FIN.
func vanish(c net.Conn, reset bool) {
	if reset {
		if tc, ok := c.(*tls.Conn); ok {
			c = tc.NetConn()
		}
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
	}
	c.Close()
}
