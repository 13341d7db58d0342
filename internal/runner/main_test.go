package runner

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// echoLLMPath is the echo-llm server built by TestMain for the managed
// runtime tests ("" if the build failed: those tests then fail).
var echoLLMPath string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "nodeld-runtime-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if p, err := buildEchoLLM(dir); err != nil {
		fmt.Fprintln(os.Stderr, "build echo-llm:", err)
	} else {
		echoLLMPath = p
	}
	// goleak.VerifyTestMain would exit before the deferred cleanup.
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak: errors on successful test run:", err)
			return 1
		}
	}
	return code
}

// buildEchoLLM builds examples/packages/echo-llm into dir.
func buildEchoLLM(dir string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = "/usr/local/go/bin/go"
	}
	out := filepath.Join(dir, "echo-llm")
	cmd := exec.Command(goBin, "build", "-o", out, "github.com/nodeld/nodeld/examples/packages/echo-llm")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%w: %s", err, b)
	}
	return out, nil
}

// needEchoLLM returns the echo-llm binary or fails the test.
func needEchoLLM(t *testing.T) string {
	t.Helper()
	if echoLLMPath == "" {
		t.Fatal("echo-llm was not built (see TestMain's output)")
	}
	return echoLLMPath
}
