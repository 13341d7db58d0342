package nodeld_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestGrafanaDashboard checks the shipped dashboard parses and that every
// nodeld metric it queries is one the README documents, so a renamed
// metric cannot leave a silently empty panel.
func TestGrafanaDashboard(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("deploy", "grafana", "nodeld.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("dashboard is not JSON: %v", err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`nodeld_[a-z_]+`)
	if len(dash.Panels) == 0 {
		t.Fatal("dashboard has no panels")
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			for _, m := range name.FindAllString(q.Expr, -1) {
				base := strings.TrimSuffix(m, "_bucket")
				if !strings.Contains(string(readme), base) {
					t.Errorf("panel %q queries %s, which the README's metrics table does not list", p.Title, m)
				}
			}
		}
	}
}
