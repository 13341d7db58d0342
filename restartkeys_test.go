package nodeld_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/config"
)

// TestRestartOnlyKeysDocumented: the docs name the keys a reload refuses
// exactly as config.RestartOnly declares them, the one list (a second list
// in the docs that drifts from it fails here).
func TestRestartOnlyKeysDocumented(t *testing.T) {
	want := config.RestartOnly()
	for _, d := range []struct{ file, marker string }{
		{"README.md", "a change to a key that needs a restart ("},
		{"docs/architecture.md", "refuse what changes only with a restart ("},
	} {
		data, err := os.ReadFile(d.file)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(strings.Fields(string(data)), " ")
		_, rest, ok := strings.Cut(text, d.marker)
		if !ok {
			t.Errorf("%s: no %q, where the restart-only keys are listed", d.file, d.marker)
			continue
		}
		list, _, _ := strings.Cut(rest, ")")
		list, _, _ = strings.Cut(list, ":") // what follows the list
		var got []string
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(list, -1) {
			got = append(got, m[1])
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s lists the restart-only keys %q; config.RestartOnly() is %q", d.file, got, want)
		}
	}
}
