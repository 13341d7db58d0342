package host

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// echoBin is the echo-llm example server, built once for the tests.
var echoBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "host-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	echoBin = filepath.Join(dir, "echo-llm")
	out, err := exec.Command("go", "build", "-o", echoBin, "github.com/nodeld/nodeld/examples/packages/echo-llm").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build echo-llm: %v\n%s", err, out)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { _ = os.RemoveAll(dir) }))
}
