package chain

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap/zaptest"
)

// lastKind is the kind of path's last entry.
func lastKind(t *testing.T, path string) (string, map[string]any) {
	t.Helper()
	lines := splitLines(readFile(t, path))
	e := mustParse(t, lines[len(lines)-1])
	var p map[string]any
	if err := json.Unmarshal(e.Payload, &p); err != nil {
		t.Fatal(err)
	}
	return e.Kind, p
}

// OpenNode: a broken chain is ErrBroken and left as it is without reset;
// with reset it is archived and the new chain begins with the reset; a
// torn tail is cut and chained.
func TestOpenNode(t *testing.T) {
	log := zaptest.NewLogger(t)
	c, path := openNew(t, Options{})
	lines := splitLines(appendN(t, c, path, 3))
	broken := joinLines(append(lines[:1], lines[2:]...))
	if err := os.WriteFile(path, broken, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenNode(path, testKey(1), "node", false, Options{}, log); !errors.Is(err, ErrBroken) {
		t.Fatalf("broken, no reset: %v", err)
	}
	if m, _ := filepath.Glob(path + ".*"); len(m) != 0 || string(readFile(t, path)) != string(broken) {
		t.Fatalf("a refused open changed files: %v", m)
	}

	ch, err := OpenNode(path, testKey(1), "node", true, Options{}, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	archived, _ := filepath.Glob(path + ".broken-*")
	if len(archived) != 1 || string(readFile(t, archived[0])) != string(broken) {
		t.Fatalf("archived %v", archived)
	}
	if kind, p := lastKind(t, path); kind != KindChainReset || p["archived"] != archived[0] || p["break"] == "" {
		t.Fatalf("new chain's entry: %s %v", kind, p)
	}

	// A torn tail: cut, kept, and chained.
	if err := os.WriteFile(path, append(readFile(t, path), []byte(`{"seq":`)...), 0o600); err != nil {
		t.Fatal(err)
	}
	ch, err = OpenNode(path, testKey(1), "node", false, Options{}, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	if kind, p := lastKind(t, path); kind != KindChainTornTail || p["bytes_cut"] != float64(len(`{"seq":`)) {
		t.Fatalf("after a torn tail: %s %v", kind, p)
	}
}
