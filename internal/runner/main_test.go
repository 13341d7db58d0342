package runner

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// The echo-llm server for the managed runtime tests is built into
// echoLLMDir by the first test that needs it (needEchoLLM), not by
// TestMain: fuzz workers run TestMain too, and building it in each of
// them cost seconds per fuzz target.
var (
	echoLLMDir  string
	echoLLMOnce sync.Once
	echoLLMPath string
	echoLLMErr  error
)

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
	echoLLMDir = dir
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
	echoLLMOnce.Do(func() { echoLLMPath, echoLLMErr = buildEchoLLM(echoLLMDir) })
	if echoLLMErr != nil {
		t.Fatalf("build echo-llm: %v", echoLLMErr)
	}
	return echoLLMPath
}
