package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/quicvarint"
)

// relay is the floor of an HTTP/3 relay on quic-go (-relay): the least work
// any HTTP/3-to-HTTP/1.1 proxy on quic-go's transport does per request, so
// that queue's HTTP/3 row can be read against it as its HTTP/1.1 rows are
// against bench/floor. Per request stream, on a goroutine of its own: read
// the stream to its end (the request, not decoded), write one fixed GET
// /1k to an upstream connection of its own connection's pool (kept alive),
// read the response head and as many body bytes as its Content-Length says,
// and write one HEADERS frame (:status 200, fixed) and one DATA frame with
// the body, then the stream's FIN. No field is decoded or forwarded, no
// control stream is opened: it is not a server, only what one costs at
// least. It returns only when the listener fails.
func relay(listen, upstream string, cert tls.Certificate) error {
	ln, err := quic.ListenAddr(listen, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h3"}},
		&quic.Config{MaxIncomingStreams: 250})
	if err != nil {
		return err
	}
	req := []byte("GET /1k HTTP/1.1\r\nHost: " + upstream + "\r\n\r\n")
	// :status 200 (QPACK static entry 25), in a HEADERS frame.
	head := []byte{0x01, 0x03, 0x00, 0x00, 0xc0 | 25}
	for {
		qc, err := ln.Accept(context.Background())
		if err != nil {
			return err
		}
		p := &upstreams{addr: upstream}
		go func() {
			for {
				str, err := qc.AcceptStream(context.Background())
				if err != nil {
					p.close()
					return
				}
				go p.serve(str, req, head)
			}
		}()
	}
}

// upstreams is one connection's pool of kept-alive upstream connections.
type upstreams struct {
	addr string
	mu   sync.Mutex
	idle []*upConn
}

type upConn struct {
	nc  net.Conn
	br  *bufio.Reader
	out []byte
}

func (p *upstreams) get() (*upConn, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		u := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return u, nil
	}
	p.mu.Unlock()
	nc, err := net.Dial("tcp", p.addr)
	if err != nil {
		return nil, err
	}
	return &upConn{nc: nc, br: bufio.NewReaderSize(nc, 16<<10)}, nil
}

func (p *upstreams) put(u *upConn) {
	p.mu.Lock()
	p.idle = append(p.idle, u)
	p.mu.Unlock()
}

func (p *upstreams) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, u := range p.idle {
		u.nc.Close()
	}
	p.idle = nil
}

var errUpstream = errors.New("h3floor: upstream response without Content-Length")

func (p *upstreams) serve(str *quic.Stream, req, head []byte) {
	var buf [512]byte
	for {
		if _, err := str.Read(buf[:]); err != nil {
			if err != io.EOF {
				str.CancelWrite(0x10c)
				return
			}
			break
		}
	}
	u, err := p.get()
	if err == nil {
		err = u.exchange(req, head)
	}
	if err != nil {
		if u != nil {
			u.nc.Close()
		}
		str.CancelWrite(0x102)
		return
	}
	if _, err := str.Write(u.out); err != nil {
		str.CancelWrite(0x102)
	} else {
		str.Close()
	}
	p.put(u)
}

// exchange sends req and reads the response into u.out as HTTP/3 frames:
// head, then a DATA frame with the body.
func (u *upConn) exchange(req, head []byte) error {
	if _, err := u.nc.Write(req); err != nil {
		return err
	}
	length := -1
	for {
		line, err := u.br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			break
		}
		if k, v, ok := bytes.Cut(line, []byte(":")); ok && bytes.EqualFold(k, []byte("content-length")) {
			length, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
		}
	}
	if length < 0 {
		return errUpstream
	}
	u.out = append(u.out[:0], head...)
	u.out = quicvarint.Append(quicvarint.Append(u.out, 0x00), uint64(length))
	n := len(u.out)
	u.out = append(u.out, make([]byte, length)...)
	_, err := io.ReadFull(u.br, u.out[n:])
	return err
}
