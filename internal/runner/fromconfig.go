package runner

import "github.com/nodeld/nodeld/internal/config"

// AdopterFromConfig maps the inference section to the adopter's config:
// the one mapping config check, run and a reload use. With
// inference.discover set, a discovered server serves the first role;
// discover replaces DefaultDiscoverCandidates when not nil (tests).
func AdopterFromConfig(cfg *config.Config, discover []DiscoverCandidate) AdopterConfig {
	ac := AdopterConfig{Interval: cfg.Inference.ProbeInterval.D, DiscoverCandidates: discover}
	if cfg.Inference.Discover && len(cfg.Inference.Roles) > 0 {
		ac.Discover, ac.DiscoverRole = true, cfg.Inference.Roles[0].Name
	}
	for _, in := range cfg.Inference.Instances {
		ac.Instances = append(ac.Instances, AdoptedInstance{Role: in.Role, Kind: Kind(in.Runtime), URL: in.URL, Model: in.Model})
	}
	return ac
}
