package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// tunnel completes a websocket upgrade (RFC 6455 section 4): the upstream
// answered 101, so the client's connection is taken over, sent the same
// 101, and the two connections are joined until either side closes. A
// tunnel is not subject to the request timeout; drain ends it
// (CloseTunnels).
func (p *Proxy) tunnel(w http.ResponseWriter, c *h1Conn, rh *respHead) error {
	cc, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		c.close()
		return fmt.Errorf("hijack for upgrade: %w", err)
	}
	cc.SetDeadline(time.Time{})
	c.nc.SetDeadline(time.Time{})
	untrack := p.track(closers{cc, c.nc})
	defer untrack()
	defer cc.Close()
	defer c.close()

	bw := brw.Writer
	bw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: ")
	bw.WriteString(rh.Upgrade)
	bw.WriteString("\r\n")
	w.Header().Write(bw)
	bw.WriteString("\r\n")
	if err := bw.Flush(); err != nil {
		return nil // the client is gone; nothing to answer
	}

	// When either direction ends the websocket is over: both connections
	// are closed, which ends the other direction too.
	both := closers{cc, c.nc}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		io.Copy(cc, c.br) // starts with what the upstream sent after its 101
		both.Close()
	}()
	io.Copy(c.nc, bufferedThen(brw.Reader, cc))
	both.Close()
	wg.Wait()
	return nil
}

// bufferedThen reads what br holds, then conn directly.
func bufferedThen(br *bufio.Reader, conn net.Conn) io.Reader {
	if br.Buffered() == 0 {
		return conn
	}
	b, _ := br.Peek(br.Buffered())
	return io.MultiReader(bytes.NewReader(b), conn)
}

// closers closes both sides of a tunnel.
type closers [2]io.Closer

func (cs closers) Close() error {
	return errors.Join(cs[0].Close(), cs[1].Close())
}
