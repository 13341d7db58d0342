package holdq

import (
	"errors"
	"fmt"
	"time"
)

// Bounds and defaults of Config.
const (
	// DefaultQueue bounds the requests held per key.
	DefaultQueue = 256
	// MaxQueue caps a configured queue.
	MaxQueue = 1 << 16
	// DefaultKeepalive is the interval of a held stream's SSE comment
	// lines.
	DefaultKeepalive = 5 * time.Second
	// MaxKeepalive caps it: proxies and clients drop a silent stream.
	MaxKeepalive = time.Minute
	// DefaultRemember is how long a key lately ready stays expected back.
	DefaultRemember = 10 * time.Minute
	// MaxRemember caps it.
	MaxRemember = 24 * time.Hour
	// MaxWait caps a hold's wait, configured or asked for.
	MaxWait = 10 * time.Minute
)

// Config is how a request for a role with no live route waits for one.
// MaxWait 0 holds nothing; the other zero fields take their defaults.
type Config struct {
	// MaxWait is the longest a request waits for its role's route.
	MaxWait time.Duration
	// Queue bounds the requests held per role.
	Queue int
	// Keepalive is the interval of a held stream's SSE comment lines.
	Keepalive time.Duration
	// Remember is how long a role that had a live route stays expected
	// back after it lost it.
	Remember time.Duration
}

// WithDefaults returns c with zero fields (but MaxWait) set to defaults.
func (c Config) WithDefaults() Config {
	if c.Queue == 0 {
		c.Queue = DefaultQueue
	}
	if c.Keepalive == 0 {
		c.Keepalive = DefaultKeepalive
	}
	if c.Remember == 0 {
		c.Remember = DefaultRemember
	}
	return c
}

// Validate reports every value out of its range; zero values are valid.
func (c Config) Validate() error {
	var errs []error
	if c.MaxWait < 0 || c.MaxWait > MaxWait {
		errs = append(errs, fmt.Errorf("hold max wait %s outside 0..%s", c.MaxWait, MaxWait))
	}
	if c.Queue < 0 || c.Queue > MaxQueue {
		errs = append(errs, fmt.Errorf("hold queue %d outside 0..%d", c.Queue, MaxQueue))
	}
	if c.Keepalive < 0 || c.Keepalive > MaxKeepalive {
		errs = append(errs, fmt.Errorf("hold keepalive %s outside 0..%s", c.Keepalive, MaxKeepalive))
	}
	if c.Remember < 0 || c.Remember > MaxRemember {
		errs = append(errs, fmt.Errorf("hold remember %s outside 0..%s", c.Remember, MaxRemember))
	}
	return errors.Join(errs...)
}
