package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// nodeldBin and echoBin are the binaries built once for the binary-level
// tests: nodeld itself and the echo-llm example model server.
var nodeldBin, echoBin string

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
	echoBin = filepath.Join(dir, "echo-llm")
	build = exec.Command("go", "build", "-o", echoBin, "../../examples/packages/echo-llm")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build echo-llm:", err)
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
