package host

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/nodeld/nodeld/internal/sandbox"
)

// echoDir holds the echo-llm example server, built by the first test that
// needs it (echoBinary): fuzz workers run this binary too, and building
// the server in each of them cost seconds per target.
var (
	echoDir  string
	echoOnce sync.Once
	echoBin  string
	echoErr  error
)

// echoBinary returns the path of the echo-llm server, building it once.
func echoBinary(t testing.TB) string {
	t.Helper()
	echoOnce.Do(func() {
		bin := filepath.Join(echoDir, "echo-llm")
		out, err := exec.Command("go", "build", "-o", bin, "github.com/nodeld/nodeld/examples/packages/echo-llm").CombinedOutput()
		if err != nil {
			echoErr = fmt.Errorf("build echo-llm: %v\n%s", err, out)
			return
		}
		echoBin = bin
	})
	if echoErr != nil {
		t.Fatal(echoErr)
	}
	return echoBin
}

func TestMain(m *testing.M) {
	// Placed instances of an isolating host start through this binary
	// as nodeld's launcher (clusterOpts.isolate), as nodeld's main does.
	if filepath.Base(os.Args[0]) == sandbox.LauncherName {
		os.Exit(sandbox.LauncherMain())
	}
	dir, err := os.MkdirTemp("", "host-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	echoDir = dir
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { _ = os.RemoveAll(dir) }))
}
