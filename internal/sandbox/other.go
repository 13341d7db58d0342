//go:build !linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
)

// CgroupV1 and CgroupV2 name the cgroup versions (Linux only).
const (
	CgroupV1 = "v1"
	CgroupV2 = "v2"
)

// LauncherMain refuses: instances are isolated on Linux only.
func LauncherMain() int {
	fmt.Fprintf(os.Stderr, "%s: isolation needs Linux\n", LauncherName)
	return 126
}

// LandlockABI is 0: there is no Landlock outside Linux.
func LandlockABI() int { return 0 }

// Limits are what an instance's cgroup holds it to; zero means no limit.
type Limits struct {
	MemBytes  uint64
	CPUMillis uint64
	PidsMax   int
}

type cgroups struct {
	version     string
	controllers []string
}

type cgroup struct{}

func detectCgroups() (*cgroups, error) { return nil, errors.New("cgroups need Linux") }

func (c *cgroups) create(string, Limits) (*cgroup, error) {
	return nil, errors.New("cgroups need Linux")
}
func (g *cgroup) join(int) error   { return nil }
func (g *cgroup) oomKills() uint64 { return 0 }
func (g *cgroup) killAll()         {}
func (g *cgroup) remove() error    { return nil }

func (c *cgroups) sweep(prefix, suffix string) {}
