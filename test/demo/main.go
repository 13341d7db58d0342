package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run returns the exit code: 0 when the workload moved and exactly one
// copy runs at the end, 1 on a miss or an error, 2 on bad usage, 130 when
// interrupted.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "client" {
		if err := runClient(ctx, args[1:], stdout); err != nil && ctx.Err() == nil {
			fmt.Fprintln(stderr, "demo client:", err)
			return 1
		}
		return 0
	}
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nodeld := fs.String("nodeld", "build/nodeld", "the nodeld binary")
	pkg := fs.String("package", "build/packages/echo-llm", "the echo-llm package directory (make example-package), unsigned or signed")
	mode := fs.String("mode", "auto", "auto (netns when root, else loopback), netns or loopback")
	keep := fs.Bool("keep", false, "keep the temp dir (configs, logs, chains) and print its path")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintln(stderr, "usage: demo [-nodeld FILE] [-package DIR] [-mode auto|netns|loopback] [-keep]")
		return 2
	}
	d, err := newDemo(*nodeld, *pkg, *mode, *keep, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	err = d.run(ctx)
	if err != nil && ctx.Err() == nil {
		d.logTails(stderr)
	}
	d.cleanup()
	switch {
	case err == nil:
		return 0
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "demo: interrupted; everything it started is stopped and removed")
		return 130
	case errors.Is(err, errMiss):
		fmt.Fprintln(stderr, "demo: FAILED:", err)
		return 1
	default:
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
}
