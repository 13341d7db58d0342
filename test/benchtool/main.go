package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtool:", err)
		os.Exit(1)
	}
}

const usage = "usage: benchtool upstream|relay|freeports|report|sse|streams|soak|chain [flags]"

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "upstream":
		return runUpstream(ctx, rest, out)
	case "relay":
		return runRelay(ctx, rest, out)
	case "freeports":
		return freePorts(rest, out)
	case "report":
		return runReport(rest, out)
	case "sse":
		return runSSE(ctx, rest, out)
	case "streams":
		return runStreams(ctx, rest, out)
	case "soak":
		return runSoak(ctx, rest, out)
	case "chain":
		return runChain(rest, os.Stdin, out)
	default:
		return errors.New(usage)
	}
}

// freePorts prints n loopback ports that were free a moment ago: all are
// held open together, so they differ.
func freePorts(args []string, out io.Writer) error {
	if len(args) != 1 {
		return errors.New("usage: benchtool freeports N")
	}
	n, err := strconv.Atoi(args[0])
	if err != nil || n < 1 || n > 64 {
		return fmt.Errorf("freeports: %q is not a count in 1..64", args[0])
	}
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		lns = append(lns, ln)
		fmt.Fprintln(out, ln.Addr().(*net.TCPAddr).Port)
	}
	return nil
}
