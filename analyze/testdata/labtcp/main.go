// Command labtcp is the tiny TCP sender and receiver that
// analyze/testdata/make-captures.sh runs inside the lab namespaces to make
// flows with a known limit: a small receive buffer (window-limited), a slow
// reader (zero-window), an application that writes in bursts
// (sender-limited), a small send buffer (send-buffer-limited), or bulk data
// (loss- or path-limited, by the link).
//
//	labtcp serve -addr 198.18.0.2:5001 [-rcvbuf 8192] [-read 4096 -every 50ms]
//	labtcp send  -addr 198.18.0.2:5001 -bytes 4000000 [-chunk 65536 -gap 200ms] [-sndbuf 16384]
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: labtcp serve|send [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "send":
		err = send(os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q: want serve or send", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "labtcp:", err)
		os.Exit(1)
	}
}

// serve accepts one connection and reads it to the end, read bytes at a
// time every interval (or as fast as possible).
func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	addr := fs.String("addr", "", "listen address")
	rcvbuf := fs.Int("rcvbuf", 0, "SO_RCVBUF on the listening socket (0: kernel default, auto-tuned)")
	read := fs.Int("read", 1<<20, "bytes per read")
	every := fs.Duration("every", 0, "pause between reads (slow reader)")
	fs.Parse(args)
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if *rcvbuf > 0 {
			c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, *rcvbuf)
			})
		}
		return serr
	}}
	ln, err := lc.Listen(nil, "tcp", *addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	fmt.Println("listening")
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, *read)
	var n int64
	for {
		k, err := io.ReadFull(c, buf)
		n += int64(k)
		if err != nil {
			break
		}
		if *every > 0 {
			time.Sleep(*every)
		}
	}
	fmt.Println("received", n)
	return nil
}

// send connects and writes bytes, chunk bytes at a time with gap between
// chunks (or all at once).
func send(args []string) error {
	fs := flag.NewFlagSet("send", flag.ExitOnError)
	addr := fs.String("addr", "", "server address")
	total := fs.Int64("bytes", 1<<20, "bytes to send")
	chunk := fs.Int64("chunk", 1<<20, "bytes per write")
	gap := fs.Duration("gap", 0, "pause between writes (application-limited sender)")
	sndbuf := fs.Int("sndbuf", 0, "SO_SNDBUF before connecting (0: kernel default, auto-tuned); caps the bytes in flight")
	fs.Parse(args)
	// Set before connect: Linux sizes the window scale and stops
	// auto-tuning the send buffer once SO_SNDBUF is set.
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if *sndbuf > 0 {
			c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, *sndbuf)
			})
		}
		return serr
	}}
	c, err := d.Dial("tcp", *addr)
	if err != nil {
		return err
	}
	buf := make([]byte, *chunk)
	for sent := int64(0); sent < *total; {
		n := min(*chunk, *total-sent)
		if _, err := c.Write(buf[:n]); err != nil {
			return err
		}
		sent += n
		if *gap > 0 && sent < *total {
			time.Sleep(*gap)
		}
	}
	// Half-close and wait for the server to finish reading, so the capture
	// holds the whole transfer including the final ACKs.
	c.(*net.TCPConn).CloseWrite()
	io.Copy(io.Discard, c)
	return c.Close()
}
