package lifecycle

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/reload"
)

// entries is a chain that keeps what is appended, or refuses.
type entries struct {
	kinds []string
	oks   []bool
	err   error
}

func (e *entries) Append(_, kind string, payload any) (chain.Entry, error) {
	if e.err != nil {
		return chain.Entry{}, e.err
	}
	e.kinds = append(e.kinds, kind)
	e.oks = append(e.oks, payload.(map[string]any)["ok"].(bool))
	return chain.Entry{}, nil
}

// TestReloaderAllOrNothing: a reload whose steps all prepare commits
// them in order and chains ok; one a step refuses, or the chain refuses,
// commits none, aborts the prepared, keeps the old config, sets the gauge
// to 0 and says why; the next good one sets it back.
func TestReloaderAllOrNothing(t *testing.T) {
	cur := config.Default()
	var log []string
	var refuse, chainErr error
	ch := &entries{}
	step := func(name string) reload.Step {
		return reload.Step{Name: name, Prepare: func() (reload.Prepared, error) {
			if name == "proxy" && refuse != nil {
				return nil, refuse
			}
			return reload.Commit(func() { log = append(log, "commit "+name) }), nil
		}}
	}
	reg := prometheus.NewRegistry()
	r, err := NewReloader(ReloaderConfig{
		Source:  "nodeld.yaml",
		Load:    func() (*config.Config, error) { return config.Default(), nil },
		Current: func() *config.Config { return cur },
		Steps: func(*config.Config) []reload.Step {
			ch.err = chainErr
			return []reload.Step{step("config"), step("mesh"), step("proxy")}
		},
		Chain: ch, Log: zap.NewNop(), Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	gauge := func() float64 {
		t.Helper()
		return testutil.ToFloat64(r.ok)
	}
	if gauge() != 1 {
		t.Fatal("the start's config does not count as loaded")
	}
	if err := r.Reload(); err != nil || !slices.Equal(log, []string{"commit config", "commit mesh", "commit proxy"}) || gauge() != 1 {
		t.Fatalf("Reload = %v, commits %v, gauge %v", err, log, gauge())
	}
	log = nil
	refuse = errors.New("port in use")
	if err := r.Reload(); !errors.Is(err, refuse) || len(log) != 0 || gauge() != 0 || r.LastError() != refuse.Error() {
		t.Fatalf("refused step: Reload = %v, commits %v, gauge %v, last %q", err, log, gauge(), r.LastError())
	}
	refuse, chainErr = nil, errors.New("disk full")
	if err := r.Reload(); err == nil || !strings.Contains(err.Error(), "chain config.reload") || len(log) != 0 {
		t.Fatalf("refused chain: Reload = %v, commits %v", err, log)
	}
	chainErr = nil
	if err := r.Reload(); err != nil || r.LastError() != "" || gauge() != 1 {
		t.Fatalf("Reload = %v, last %q, gauge %v", err, r.LastError(), gauge())
	}
	if want := []bool{true, false, true}; !slices.Equal(ch.oks, want) {
		t.Errorf("chained %v, want %v (the chain refused one)", ch.oks, want)
	}
	if got := testutil.ToFloat64(r.total.WithLabelValues("refused")); got != 2 {
		t.Errorf("refused reloads = %v, want 2", got)
	}
}
