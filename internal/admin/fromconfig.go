package admin

import "github.com/nodeld/nodeld/internal/config"

// FromConfig maps the admin section: the one mapping run and a reload use.
func FromConfig(cfg *config.Config) Config {
	return Config{Listen: cfg.Admin.Listen, Pprof: cfg.Admin.Pprof}
}
