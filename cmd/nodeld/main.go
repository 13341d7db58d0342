package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/nodeld/nodeld/internal/sandbox"
)

func main() {
	// nodeld started as the launcher of a placed instance (internal/sandbox)
	// does that and nothing else: no flag, config or logger.
	if filepath.Base(os.Args[0]) == sandbox.LauncherName {
		os.Exit(sandbox.LauncherMain())
	}
	os.Exit(exitCode(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr), os.Stderr))
}

// exitError carries an exit status other than 1.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError makes a status-2 error.
func usageError(format string, args ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, args...)}
}

// errSilent is an exit status whose message was already printed.
type errSilent int

func (e errSilent) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// exitCode prints err on one line and returns the process exit status.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	var silent errSilent
	if errors.As(err, &silent) {
		return int(silent)
	}
	fmt.Fprintf(stderr, "nodeld: %v\n", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}
