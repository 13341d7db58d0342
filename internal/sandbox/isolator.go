package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/nodeld/nodeld/internal/grammar"
)

// Modes of host.isolation.filesystem, resources and users.
const (
	// ModeOn enforces, and refuses to place what cannot be enforced.
	ModeOn = "on"
	// ModeOff opts out (the operator takes the risk).
	ModeOff = "off"
	// ModeAuto (users only) enforces where the daemon can: as root.
	ModeAuto = "auto"
)

// What Support reports for a part that is not enforced.
const (
	// StateOff: the operator turned it off.
	StateOff = "off"
	// StateUnavailable: on, but this machine or daemon cannot enforce it.
	StateUnavailable = "unavailable"
)

// Config is host.isolation, resolved.
type Config struct {
	// Filesystem is ModeOn or ModeOff.
	Filesystem string
	// Resources is ModeOn or ModeOff.
	Resources string
	// Users is ModeAuto, ModeOn or ModeOff.
	Users string
	// UIDFirst is the first id of the range: the group every instance
	// shares (the only group besides root's that may search the data
	// directory); instances get UIDFirst+1 ... UIDFirst+UIDCount-1.
	UIDFirst, UIDCount uint32
	// PidsMax bounds each instance's processes and threads; 0 means none.
	PidsMax int
	// ReadPaths are more paths every instance may read and execute.
	ReadPaths []string
	// DataDir is node.data_dir; scratch directories go in
	// <DataDir>/scratch.
	DataDir string
	// Exe is nodeld's own binary, started as the launcher; "" means
	// os.Executable.
	Exe string
	// NodeID is this node's id, which ends every instance id it places:
	// New removes the empty cgroups of this node's instances that an
	// earlier run left (a crash). "" removes none. Nodes sharing a
	// machine share the cgroup hierarchy, so the others' stay.
	NodeID string
}

// Support is what this daemon enforces on the instances it starts.
type Support struct {
	// Filesystem is "landlock" (enforced), StateOff or StateUnavailable.
	Filesystem string `json:"filesystem"`
	// LandlockABI is the kernel's Landlock ABI version, 0 if none.
	LandlockABI int `json:"landlock_abi"`
	// Users is "dynamic" (a uid per instance), "shared" (the daemon's
	// own uid: the file-system rules still hold) or StateOff.
	Users string `json:"users"`
	// Cgroup is CgroupV1 or CgroupV2 (enforced), StateOff or
	// StateUnavailable.
	Cgroup string `json:"cgroup"`
	// Controllers are the cgroup controllers limits are set with.
	Controllers []string `json:"controllers,omitempty"`
	// Problem says why a part that is on is unavailable ("" if none).
	Problem string `json:"problem,omitempty"`
}

// Values of Support.Users.
const (
	UsersDynamic = "dynamic"
	UsersShared  = "shared"
)

// ErrUnavailable is wrapped by Admit's refusals.
var ErrUnavailable = errors.New("isolation unavailable")

// Isolator launches instances isolated as its Config says, with what the
// machine supports.
type Isolator struct {
	cfg     Config
	exe     string
	support Support
	cg      *cgroups // nil: no cgroups

	// mu guards uids.
	mu sync.Mutex
	// uids maps an instance id to the uid it holds.
	uids map[string]uint32
}

// New detects what the machine supports and prepares the data directory.
// It fails for users: on without root, and for a bad Config.
func New(cfg Config) (*Isolator, error) {
	exe := cfg.Exe
	if exe == "" {
		e, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("isolation: find nodeld's binary: %w", err)
		}
		exe = e
	}
	i := &Isolator{cfg: cfg, exe: exe, uids: map[string]uint32{}}
	s := &i.support
	s.LandlockABI = LandlockABI()
	var problems []string
	switch {
	case cfg.Filesystem == ModeOff:
		s.Filesystem = StateOff
	case s.LandlockABI < 1:
		s.Filesystem = StateUnavailable
		problems = append(problems, "the kernel has no Landlock")
	default:
		s.Filesystem = "landlock"
	}
	root := os.Geteuid() == 0
	switch {
	case cfg.Users == ModeOff:
		s.Users = StateOff
	case root && cfg.UIDCount >= 2 && ancestorsSearchable(cfg.DataDir) == nil:
		s.Users = UsersDynamic
	case cfg.Users == ModeOn && !root:
		return nil, errors.New("isolation: host.isolation.users is on but nodeld is not root")
	case cfg.Users == ModeOn:
		return nil, fmt.Errorf("isolation: host.isolation.users is on but %v", ancestorsSearchable(cfg.DataDir))
	default:
		s.Users = UsersShared
		if root {
			problems = append(problems, fmt.Sprintf("users: %v", ancestorsSearchable(cfg.DataDir)))
		}
	}
	if cfg.Resources == ModeOff {
		s.Cgroup = StateOff
	} else if cg, err := detectCgroups(); err != nil {
		s.Cgroup = StateUnavailable
		problems = append(problems, "cgroups: "+err.Error())
	} else {
		i.cg, s.Cgroup, s.Controllers = cg, cg.version, cg.controllers
	}
	if len(problems) > 0 {
		s.Problem = strings.Join(problems, "; ")
	}
	if err := i.prepareDirs(); err != nil {
		return nil, err
	}
	if i.cg != nil && cfg.NodeID != "" {
		i.cg.sweep(cgroupPrefix, "-"+cfg.NodeID)
	}
	return i, nil
}

// ancestorsSearchable reports an ancestor of dir that an instance's uid
// could not search (no execute bit for others): it could not reach its
// package or scratch directory, so instances keep the daemon's uid.
func ancestorsSearchable(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for p := filepath.Dir(abs); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s, above the data dir, is not searchable by others", p)
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// Support returns what the isolator enforces.
func (i *Isolator) Support() Support {
	s := i.support
	s.Controllers = slices.Clone(s.Controllers)
	return s
}

// scratchRoot is <data_dir>/scratch.
func (i *Isolator) scratchRoot() string { return filepath.Join(i.cfg.DataDir, "scratch") }

// prepareDirs makes the scratch root and, with dynamic users, lets the
// instances' shared group (and no one else) search the data directory
// and the scratch root: every state file in it stays 0600. No instance
// outlives the daemon that placed it, so what is in the scratch root
// when it starts was left by an earlier run that ended without unloading
// (a crash, kill -9): it is removed.
func (i *Isolator) prepareDirs() error {
	root := i.scratchRoot()
	if err := os.MkdirAll(root, 0o700); err != nil {
		return fmt.Errorf("isolation: %w", err)
	}
	left, err := os.ReadDir(root)
	if err != nil {
		return fmt.Errorf("isolation: %w", err)
	}
	for _, e := range left {
		if err := os.RemoveAll(filepath.Join(root, e.Name())); err != nil {
			return fmt.Errorf("isolation: remove a scratch directory left by an earlier run: %w", err)
		}
	}
	if i.support.Users != UsersDynamic {
		return nil
	}
	for _, dir := range []string{i.cfg.DataDir, root} {
		if err := os.Chown(dir, -1, int(i.cfg.UIDFirst)); err != nil {
			return fmt.Errorf("isolation: %w", err)
		}
		if err := os.Chmod(dir, 0o710); err != nil {
			return fmt.Errorf("isolation: %w", err)
		}
	}
	return nil
}

// Admit reports whether an instance with lim can be placed: not when
// filesystem isolation is on and unavailable, nor when it declares a
// limit and resource isolation is on and unavailable.
func (i *Isolator) Admit(lim Limits) error {
	if i.support.Filesystem == StateUnavailable {
		return fmt.Errorf("%w: filesystem isolation is on and the kernel has no Landlock (host.isolation.filesystem: off opts out)", ErrUnavailable)
	}
	if i.support.Cgroup == StateUnavailable && (lim.MemBytes > 0 || lim.CPUMillis > 0) {
		return fmt.Errorf("%w: the instance declares resources and this node cannot create cgroups (host.isolation.resources: off opts out)", ErrUnavailable)
	}
	return nil
}

// Instance is one placed instance's isolation: its uid, scratch directory
// and cgroup. Close releases them.
type Instance struct {
	iso     *Isolator
	id      string
	pkgDir  string
	scratch string
	uid     uint32 // 0: the daemon's own
	cg      *cgroup
}

// Instance prepares the isolation of instance id, whose package is in
// pkgDir: it takes a uid, makes the scratch directory and the cgroup.
func (i *Isolator) Instance(id, pkgDir string, lim Limits) (*Instance, error) {
	if err := i.Admit(lim); err != nil {
		return nil, err
	}
	if !grammar.ValidInstanceID(id) {
		return nil, fmt.Errorf("isolation: instance id %q cannot name a directory", id)
	}
	in := &Instance{iso: i, id: id, pkgDir: pkgDir, scratch: filepath.Join(i.scratchRoot(), id)}
	if i.support.Users == UsersDynamic {
		uid, err := i.takeUID(id)
		if err != nil {
			return nil, err
		}
		in.uid = uid
	}
	ok := false
	defer func() {
		if !ok {
			in.Close()
		}
	}()
	// A place starts with an empty scratch directory (restarts of the
	// instance keep it).
	if err := os.RemoveAll(in.scratch); err != nil {
		return nil, fmt.Errorf("isolation: scratch: %w", err)
	}
	for _, dir := range []string{in.scratch, filepath.Join(in.scratch, "tmp")} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("isolation: scratch: %w", err)
		}
		if in.uid != 0 {
			if err := os.Chown(dir, int(in.uid), int(in.uid)); err != nil {
				return nil, fmt.Errorf("isolation: scratch: %w", err)
			}
		}
	}
	if i.cg != nil {
		if lim.PidsMax == 0 {
			lim.PidsMax = i.cfg.PidsMax
		}
		g, err := i.cg.create(cgroupPrefix+id, lim)
		if err != nil {
			return nil, fmt.Errorf("isolation: %w", err)
		}
		in.cg = g
	}
	ok = true
	return in, nil
}

// cgroupPrefix begins the name of every instance cgroup.
const cgroupPrefix = "nodeld-"

// takeUID gives id the lowest free uid of the range.
func (i *Isolator) takeUID(id string) (uint32, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if uid, ok := i.uids[id]; ok {
		return uid, nil
	}
	used := map[uint32]bool{}
	for _, u := range i.uids {
		used[u] = true
	}
	for n := uint32(1); n < i.cfg.UIDCount; n++ {
		if uid := i.cfg.UIDFirst + n; !used[uid] {
			i.uids[id] = uid
			return uid, nil
		}
	}
	return 0, fmt.Errorf("%w: every uid of host.isolation.uid_range is in use", ErrUnavailable)
}

// UID is the instance's uid, 0 when it runs as the daemon's user.
func (in *Instance) UID() uint32 { return in.uid }

// Scratch is the instance's scratch directory.
func (in *Instance) Scratch() string { return in.scratch }

// Close removes the scratch directory and the cgroup and frees the uid.
func (in *Instance) Close() error {
	var errs []error
	if in.cg != nil {
		in.cg.killAll()
		if err := in.cg.remove(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(in.scratch); err != nil {
		errs = append(errs, err)
	}
	in.iso.mu.Lock()
	if in.iso.uids[in.id] == in.uid {
		delete(in.iso.uids, in.id)
	}
	in.iso.mu.Unlock()
	return errors.Join(errs...)
}

// Read-only system paths every instance may read and execute; those
// missing grant nothing.
var systemRead = []string{
	"/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/proc", "/sys",
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
	"/etc/localtime", "/etc/timezone", "/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf",
	"/etc/host.conf", "/etc/gai.conf", "/etc/passwd", "/etc/group", "/etc/ssl", "/etc/pki",
	"/etc/ca-certificates", "/etc/os-release", "/etc/mime.types", "/etc/OpenCL", "/etc/vulkan",
	"/etc/nvidia", "/etc/gnutls", "/etc/crypto-policies",
}

// Devices every instance may read, write and ioctl: the common character
// devices and the GPUs' (NVIDIA, AMD/Intel DRM, AMD KFD).
var systemDevices = []string{
	"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty",
	"/dev/dri", "/dev/kfd", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
	"/dev/nvidia-modeset", "/dev/nvidia-caps", "/dev/shm",
}

// Wrap makes cmd start through the launcher, isolated: nodeld's binary
// as LauncherName with the spec on SpecFD, the instance's uid, TMPDIR
// and NODELD_SCRATCH set. The caller starts cmd, then calls started with
// its pid (which joins the cgroup and sends the spec; an error means the
// launcher will not exec and the caller should kill it), and ended once
// the process is reaped, which kills what is left in the cgroup and
// reports whether the kernel killed a process of it for its memory.
func (in *Instance) Wrap(cmd *exec.Cmd) (started func(pid int) error, ended func() (oomKilled bool), err error) {
	s := Spec{Path: cmd.Path, Args: cmd.Args, Landlock: in.iso.support.Filesystem == "landlock"}
	s.Read = append(s.Read, in.pkgDir)
	s.Read = append(s.Read, systemRead...)
	s.Read = append(s.Read, in.iso.cfg.ReadPaths...)
	s.Read = append(s.Read, cmd.Path)
	s.Write = []string{in.scratch}
	s.Devices = append(s.Devices, systemDevices...)
	if nv, _ := filepath.Glob("/dev/nvidia[0-9]*"); len(nv) > 0 {
		s.Devices = append(s.Devices, nv...)
	}
	if err := s.validate(); err != nil {
		return nil, nil, fmt.Errorf("isolation: %w", err)
	}
	data, err := json.Marshal(s)
	if err != nil {
		return nil, nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("isolation: spec pipe: %w", err)
	}
	cmd.Path, cmd.Args = in.iso.exe, []string{LauncherName}
	cmd.ExtraFiles = []*os.File{r}
	cmd.Env = append(cmd.Env, "TMPDIR="+filepath.Join(in.scratch, "tmp"), "NODELD_SCRATCH="+in.scratch)
	if in.uid != 0 {
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.Credential = &syscall.Credential{
			Uid: in.uid, Gid: in.uid, Groups: []uint32{in.iso.cfg.UIDFirst},
		}
	}
	var before uint64
	started = func(pid int) error {
		r.Close()
		defer w.Close()
		if in.cg != nil {
			if err := in.cg.join(pid); err != nil {
				return fmt.Errorf("isolation: %w", err)
			}
			before = in.cg.oomKills()
		}
		if _, err := w.Write(data); err != nil {
			return fmt.Errorf("isolation: send the spec to pid %d: %w", pid, err)
		}
		return nil
	}
	ended = func() bool {
		r.Close()
		w.Close() // a start that failed never called started
		if in.cg == nil {
			return false
		}
		in.cg.killAll()
		return in.cg.oomKills() > before
	}
	return started, ended, nil
}

// String describes s for status lines: "filesystem landlock (ABI 7),
// users dynamic, cgroup v1 (cpu memory pids)".
func (s Support) String() string {
	fs := s.Filesystem
	if fs == "landlock" {
		fs += " (ABI " + strconv.Itoa(s.LandlockABI) + ")"
	}
	cg := s.Cgroup
	if len(s.Controllers) > 0 {
		cg += fmt.Sprint(" ", s.Controllers)
	}
	return "filesystem " + fs + ", users " + s.Users + ", cgroup " + cg
}

// IsInstanceProcess reports whether the process pid (of uid) belongs to a
// placed instance: its uid is in the instances' range (users dynamic) or
// it sits in an instance's cgroup. The operator socket refuses such
// peers: Landlock before ABI 9 does not stop an instance from connecting
// to a socket by its path.
func (i *Isolator) IsInstanceProcess(pid int, uid uint32) bool {
	if i.support.Users == UsersDynamic && uid >= i.cfg.UIDFirst && uid-i.cfg.UIDFirst < i.cfg.UIDCount {
		return true
	}
	if i.cg == nil {
		return false
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		// Gone already, or unreadable: refuse when in doubt.
		return true
	}
	for _, seg := range strings.FieldsFunc(string(data), func(r rune) bool { return r == '/' || r == '\n' || r == ':' }) {
		if strings.HasPrefix(seg, cgroupPrefix) {
			return true
		}
	}
	return false
}
