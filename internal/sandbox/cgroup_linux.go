package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Cgroup versions Support.Cgroup reports.
const (
	CgroupV1 = "v1"
	CgroupV2 = "v2"
)

// cgroups is where this daemon makes its instances' cgroups: for v2 one
// base directory, for v1 one per controller (memory, pids, cpu).
type cgroups struct {
	version string
	// base maps a controller to the directory instance cgroups are made
	// in; v2 has one entry, "".
	base map[string]string
	// controllers are the controllers limits are set with, sorted.
	controllers []string
}

// wantControllers are the controllers an instance is limited with;
// memory is required, the others are used when present.
var wantControllers = []string{"cpu", "memory", "pids"}

// detectCgroups finds a cgroup hierarchy this process may create
// children in, from /proc/self/cgroup and /proc/self/mountinfo, and
// proves it by creating and removing a probe child. For v2 it enables
// the controllers for children, first moving the daemon into a leaf
// "nodeld" child when its cgroup has processes (the no-internal-process
// rule of a delegated subtree).
func detectCgroups() (*cgroups, error) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	paths := map[string]string{} // controller ("" for v2) -> cgroup path
	for line := range strings.Lines(string(self)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			paths[c] = parts[2]
		}
	}
	mnt := cgroupMounts(mounts)
	v1 := false
	for _, c := range wantControllers {
		if _, ok := mnt[c]; ok {
			v1 = true
		}
	}
	if v1 {
		return detectV1(paths, mnt)
	}
	root, ok := mnt[""]
	if !ok {
		return nil, errors.New("no cgroup hierarchy mounted")
	}
	return detectV2(filepath.Join(root.dir, relTo(paths[""], root.root)))
}

type mountPoint struct{ dir, root string }

// cgroupMounts maps each v1 controller to its mount, and "" to the v2
// mount.
func cgroupMounts(mountinfo []byte) map[string]mountPoint {
	out := map[string]mountPoint{}
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		i := slices.Index(f, "-")
		if i < 0 || i+3 >= len(f) || len(f) < 5 {
			continue
		}
		mp := mountPoint{dir: f[4], root: f[3]}
		switch f[i+1] {
		case "cgroup2":
			out[""] = mp
		case "cgroup":
			for _, opt := range strings.Split(f[i+3], ",") {
				if slices.Contains(wantControllers, opt) {
					out[opt] = mp
				}
			}
		}
	}
	return out
}

func relTo(path, root string) string {
	if root == "/" {
		return path
	}
	return strings.TrimPrefix(path, root)
}

func detectV1(paths map[string]string, mnt map[string]mountPoint) (*cgroups, error) {
	cg := &cgroups{version: CgroupV1, base: map[string]string{}}
	for _, c := range wantControllers {
		m, ok := mnt[c]
		if !ok {
			continue
		}
		dir := filepath.Join(m.dir, relTo(paths[c], m.root))
		if err := probeDir(dir); err != nil {
			if c == "memory" {
				return nil, fmt.Errorf("memory cgroup %s: %w", dir, err)
			}
			continue
		}
		cg.base[c] = dir
		cg.controllers = append(cg.controllers, c)
	}
	if _, ok := cg.base["memory"]; !ok {
		return nil, errors.New("no memory cgroup controller")
	}
	return cg, nil
}

func detectV2(dir string) (*cgroups, error) {
	avail, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil, err
	}
	var enable []string
	for _, c := range wantControllers {
		if slices.Contains(strings.Fields(string(avail)), c) {
			enable = append(enable, c)
		}
	}
	if !slices.Contains(enable, "memory") {
		return nil, fmt.Errorf("cgroup %s: no memory controller delegated", dir)
	}
	ctl := "+" + strings.Join(enable, " +")
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(ctl), 0); err != nil {
		if !errors.Is(err, syscall.EBUSY) {
			return nil, fmt.Errorf("cgroup %s: enable controllers: %w", dir, err)
		}
		// The daemon's cgroup has processes: move them to a leaf.
		leaf := filepath.Join(dir, "nodeld")
		if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("cgroup %s: %w", leaf, err)
		}
		if err := writeProcs(dir, leaf); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(ctl), 0); err != nil {
			return nil, fmt.Errorf("cgroup %s: enable controllers: %w", dir, err)
		}
	}
	if err := probeDir(dir); err != nil {
		return nil, err
	}
	return &cgroups{version: CgroupV2, base: map[string]string{"": dir}, controllers: enable}, nil
}

// writeProcs moves every process of cgroup from into cgroup to.
func writeProcs(from, to string) error {
	data, err := os.ReadFile(filepath.Join(from, "cgroup.procs"))
	if err != nil {
		return err
	}
	for _, pid := range strings.Fields(string(data)) {
		if err := os.WriteFile(filepath.Join(to, "cgroup.procs"), []byte(pid), 0); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("move pid %s to %s: %w", pid, to, err)
		}
	}
	return nil
}

// probeSeq names each probe child apart: several isolators of one
// process (a start beside a reload, nodes in one test binary) probe the
// same directory at once, and a shared name made one of them fail.
var probeSeq atomic.Uint64

// probeDir proves children can be made in dir.
func probeDir(dir string) error {
	p := filepath.Join(dir, "nodeld-probe-"+strconv.Itoa(os.Getpid())+"-"+strconv.FormatUint(probeSeq.Add(1), 10))
	if err := os.Mkdir(p, 0o755); err != nil {
		return err
	}
	return os.Remove(p)
}

// Limits are what an instance's cgroup holds it to; zero means no limit.
type Limits struct {
	// MemBytes is the memory limit (the manifest's resources.mem_bytes).
	MemBytes uint64
	// CPUMillis is the CPU quota in thousandths of a core.
	CPUMillis uint64
	// PidsMax bounds its processes and threads.
	PidsMax int
}

// cgroup is one instance's cgroup, in every hierarchy of cgroups.
type cgroup struct {
	v2   bool
	dirs map[string]string // controller ("" for v2) -> directory
}

// create makes (or reuses) the cgroup name and sets its limits.
func (c *cgroups) create(name string, lim Limits) (*cgroup, error) {
	g := &cgroup{v2: c.version == CgroupV2, dirs: map[string]string{}}
	for ctl, base := range c.base {
		dir := filepath.Join(base, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("cgroup %s: %w", dir, err)
		}
		g.dirs[ctl] = dir
	}
	var errs []error
	set := func(ctl, file, value string) {
		dir, ok := g.dirs[ctl]
		if g.v2 {
			dir, ok = g.dirs[""]
			if !slices.Contains(c.controllers, ctl) {
				return
			}
		}
		if !ok {
			return
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0); err != nil {
			errs = append(errs, fmt.Errorf("cgroup %s: %w", file, err))
		}
	}
	if g.v2 {
		if lim.MemBytes > 0 {
			set("memory", "memory.max", strconv.FormatUint(lim.MemBytes, 10))
			if _, err := os.Stat(filepath.Join(g.dirs[""], "memory.swap.max")); err == nil {
				set("memory", "memory.swap.max", "0")
			}
		}
		if lim.PidsMax > 0 {
			set("pids", "pids.max", strconv.Itoa(lim.PidsMax))
		}
		if lim.CPUMillis > 0 {
			set("cpu", "cpu.max", strconv.FormatUint(lim.CPUMillis*100, 10)+" 100000")
		}
	} else {
		if lim.MemBytes > 0 {
			set("memory", "memory.limit_in_bytes", strconv.FormatUint(lim.MemBytes, 10))
			if _, err := os.Stat(filepath.Join(g.dirs["memory"], "memory.memsw.limit_in_bytes")); err == nil {
				set("memory", "memory.memsw.limit_in_bytes", strconv.FormatUint(lim.MemBytes, 10))
			}
		}
		if lim.PidsMax > 0 {
			set("pids", "pids.max", strconv.Itoa(lim.PidsMax))
		}
		if lim.CPUMillis > 0 {
			set("cpu", "cpu.cfs_period_us", "100000")
			set("cpu", "cpu.cfs_quota_us", strconv.FormatUint(lim.CPUMillis*100, 10))
		}
	}
	if err := errors.Join(errs...); err != nil {
		g.remove()
		return nil, err
	}
	return g, nil
}

// join moves pid into the cgroup.
func (g *cgroup) join(pid int) error {
	for _, dir := range g.dirs {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("join cgroup %s: %w", dir, err)
		}
	}
	return nil
}

// oomKills is how many processes the kernel killed in the cgroup for
// exceeding its memory, since it was made.
func (g *cgroup) oomKills() uint64 {
	file := filepath.Join(g.dirs["memory"], "memory.oom_control")
	if g.v2 {
		file = filepath.Join(g.dirs[""], "memory.events")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok && k == "oom_kill" {
			n, _ := strconv.ParseUint(v, 10, 64)
			return n
		}
	}
	return 0
}

// killAll SIGKILLs every process left in the cgroup: a descendant that
// left the process group does not outlive its instance either.
func (g *cgroup) killAll() {
	for _, dir := range g.dirs {
		data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// sweep removes the instance cgroups named prefix...suffix left by an
// earlier run. Only empty ones go (the kernel refuses the others), so a
// process still in one is never disturbed.
func (c *cgroups) sweep(prefix, suffix string) {
	for _, base := range c.base {
		entries, err := os.ReadDir(base)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if n := e.Name(); e.IsDir() && strings.HasPrefix(n, prefix) && strings.HasSuffix(n, suffix) {
				_ = os.Remove(filepath.Join(base, n))
			}
		}
	}
}

// remove deletes the cgroup's directories; a cgroup with processes left
// stays (the kernel refuses), to be reused by the next place of the same
// instance.
func (g *cgroup) remove() error {
	var errs []error
	for _, dir := range g.dirs {
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
