package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// nodeldBin is the binary built once for the binary-level tests.
var nodeldBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "nodeld-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	nodeldBin = filepath.Join(dir, "nodeld")
	build := exec.Command("go", "build", "-race", "-o", nodeldBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build nodeld:", err)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}
