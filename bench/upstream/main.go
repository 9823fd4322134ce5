// Command upstream is the origin server of bench/compare.sh: every proxy in
// the comparison forwards to one instance of it, and the "direct" peer loads
// it with no proxy in between.
//
// One port speaks HTTP/1.1 and h2c with prior knowledge (net/http's
// Protocols), so the same server answers every peer whatever protocol the
// peer uses upstream. Responses are fixed and cheap so that the upstream's
// share of the load CPU stays small and equal for every peer:
//
//	GET  /1k    1024 bytes
//	GET  /64k   65536 bytes
//	POST /echo  the request body, read whole and then written back
//
// Every response has Content-Type and Content-Length and no Date header.
// Two more routes serve bench/chunks, which measures chunk framing:
//
//	POST /discard              the request body read and dropped; the answer is its length
//	GET  /chunks?n=N&size=S    a chunked body of N chunks of S bytes (HTTP/1.1 only),
//	                           written raw from one pre-built buffer, then the connection closes
//
//	upstream -listen 127.0.0.1:18010
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"sync"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18010", "host:port to serve HTTP/1.1 and h2c on")
	flag.Parse()
	srv := &http.Server{Addr: *listen, Handler: newHandler(), ErrorLog: log.New(io.Discard, "", 0)}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintf(os.Stderr, "upstream: serve %s: %v\n", *listen, err)
		os.Exit(1)
	}
}

// body is a fixed response body with its Content-Length value prepared once.
type body struct {
	data   []byte
	length []string
}

func newBody(n int) body {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	return body{data: b, length: []string{strconv.Itoa(n)}}
}

var contentType = []string{"application/octet-stream"}

// handler answers the three benchmark routes and 404 for anything else.
type handler struct {
	k1, k64 body
	bufs    sync.Pool
}

func newHandler() *handler {
	return &handler{
		k1:   newBody(1 << 10),
		k64:  newBody(64 << 10),
		bufs: sync.Pool{New: func() any { return new(bytes.Buffer) }},
	}
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	// A nil Date entry stops net/http from adding the header.
	hdr["Date"] = nil
	hdr["Content-Type"] = contentType
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/1k":
		h.write(w, h.k1)
	case r.Method == http.MethodGet && r.URL.Path == "/64k":
		h.write(w, h.k64)
	case r.Method == http.MethodPost && r.URL.Path == "/discard":
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
			return
		}
		text := strconv.FormatInt(n, 10)
		hdr["Content-Length"] = []string{strconv.Itoa(len(text))}
		_, _ = io.WriteString(w, text)
	case r.Method == http.MethodGet && r.URL.Path == "/chunks":
		writeChunks(w, r)
	case r.Method == http.MethodPost && r.URL.Path == "/echo":
		buf := h.bufs.Get().(*bytes.Buffer)
		defer h.bufs.Put(buf)
		buf.Reset()
		if _, err := buf.ReadFrom(r.Body); err != nil {
			http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
			return
		}
		hdr["Content-Length"] = []string{strconv.Itoa(buf.Len())}
		_, _ = w.Write(buf.Bytes())
	default:
		http.NotFound(w, r)
	}
}

// writeChunks answers with n chunks of size bytes, written raw on the
// hijacked connection: net/http's own writer would make one chunk of each
// Write, and many small Writes are what a proxy would then be measured
// with, not the upstream's framing.
func writeChunks(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	n, err1 := strconv.Atoi(q.Get("n"))
	size, err2 := strconv.Atoi(q.Get("size"))
	if err1 != nil || err2 != nil || n < 0 || size < 1 || size > 1<<20 {
		http.Error(w, "want n>=0 and 1<=size<=1048576", http.StatusBadRequest)
		return
	}
	c, bw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "hijack: "+err.Error(), http.StatusInternalServerError)
		return
	}
	defer c.Close()
	bw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
	if bw.Flush() != nil {
		return
	}
	one := []byte(strconv.FormatInt(int64(size), 16) + "\r\n")
	one = append(one, bytes.Repeat([]byte{'x'}, size)...)
	one = append(one, "\r\n"...)
	per := max(1, (1<<20)/len(one))
	buf := bytes.Repeat(one, per)
	for left := n; left > 0; {
		k := min(left, per)
		if _, err := c.Write(buf[:k*len(one)]); err != nil {
			return
		}
		left -= k
	}
	io.WriteString(c, "0\r\n\r\n")
}

func (h *handler) write(w http.ResponseWriter, b body) {
	w.Header()["Content-Length"] = b.length
	_, _ = w.Write(b.data)
}
