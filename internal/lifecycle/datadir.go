package lifecycle

import (
	"errors"
	"fmt"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/identity"
)

// ChainSource is the chain source of the daemon's own entries: its start
// and stop, and its config reloads.
const ChainSource = "nodeld"

// EnsureDataDir makes the data directory with mode 0700, and tightens one
// that exists with any group or other permission to 0700, saying so: it
// holds the node key and the audit chain.
func EnsureDataDir(dir string, log *zap.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("data dir %s is not a directory", dir)
	}
	// Group search alone is host.isolation.users: the instances' shared
	// group reaches its package and scratch directories, nothing more.
	if perm := fi.Mode().Perm(); perm&0o067 != 0 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("data dir: tighten %s from %#o to 0700: %w", dir, perm, err)
		}
		log.Warn("tightened the data dir's mode to 0700", zap.String("path", dir), zap.String("was", fmt.Sprintf("%#o", perm)))
	}
	return nil
}

// OpenChain opens the audit chain (chain.OpenNode), archiving a broken
// one first when the operator asked for it (reset), and tells an operator
// who did not how to.
func OpenChain(path string, id *identity.Identity, reset bool, reg prometheus.Registerer, log *zap.Logger) (*chain.Chain, error) {
	ch, err := chain.OpenNode(path, id.PrivateKey(), ChainSource, reset, chain.Options{Logger: log.Named("chain"), Registerer: reg}, log)
	if errors.Is(err, chain.ErrBroken) {
		return nil, fmt.Errorf("%w; inspect it with nodeld chain verify %s, or start with --chain-reset to archive it and begin a new chain", err, path)
	}
	return ch, err
}

// NewRegistry is the daemon's metrics registry: the Go and process
// collectors and nodeld_build_info for version and goVersion. Nothing
// registers on prometheus.DefaultRegisterer.
func NewRegistry(version, goVersion string) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nodeld_build_info",
		Help: "Build of the running nodeld; the value is always 1.",
	}, []string{"version", "goversion"})
	buildInfo.WithLabelValues(version, goVersion).Set(1)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo)
	return reg
}
