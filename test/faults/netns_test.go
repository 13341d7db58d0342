//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// nsPrefix starts the name of every namespace the suite makes, followed by
// the pid of the test process that made it, so a later run can remove
// what a killed run left (see removeStale).
const nsPrefix = "nodeld-faults-"

// netnsDir is where `ip netns add` keeps its namespace files.
const netnsDir = "/run/netns"

// netns is a named network namespace made by `ip netns add`.
type netns struct {
	name string
}

func (ns *netns) path() string { return netnsDir + "/" + ns.name }

// ip runs the ip command and returns its error with its output.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// addNetns makes a namespace named nsPrefix+<pid>-<suffix> with its
// loopback up.
func addNetns(suffix string) (*netns, error) {
	ns := &netns{name: nsPrefix + strconv.Itoa(os.Getpid()) + "-" + suffix}
	if err := ip("netns", "add", ns.name); err != nil {
		return nil, err
	}
	if err := ip("-n", ns.name, "link", "set", "lo", "up"); err != nil {
		_ = ip("netns", "del", ns.name)
		return nil, err
	}
	return ns, nil
}

// del kills what still runs in the namespace and removes it; its
// interfaces go with it.
func (ns *netns) del() error {
	killNetnsPids(ns.name)
	return ip("netns", "del", ns.name)
}

// killNetnsPids SIGKILLs every process `ip netns pids` lists in the
// namespace.
func killNetnsPids(name string) {
	out, err := exec.Command("ip", "netns", "pids", name).Output()
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// removeStale removes the namespaces of earlier runs whose test process
// is gone (a run killed before its cleanup), and what runs in them.
func removeStale() {
	entries, err := os.ReadDir(netnsDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), nsPrefix)
		if !ok {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		killNetnsPids(e.Name())
		_ = ip("netns", "del", e.Name())
	}
}

// do runs f on an OS thread that has entered the namespace, then moves
// the thread back. Sockets f creates belong to the namespace for their
// whole life, whichever goroutine uses them later. If the thread cannot
// be moved back it stays locked, and the runtime ends it with the
// goroutine: no other goroutine ever runs in a foreign namespace.
func (ns *netns) do(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		target, err := os.Open(ns.path())
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := setns(target); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter %s: %w", ns.name, err)
			return
		}
		ferr := f()
		if err := setns(orig); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("leave %s: %w", ns.name, err))
			return // still locked: the thread ends with this goroutine
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

func setns(f *os.File) error {
	if _, _, errno := syscall.RawSyscall(sysSetns, f.Fd(), syscall.CLONE_NEWNET, 0); errno != 0 {
		return errno
	}
	return nil
}

// dial connects from inside the namespace: its loopback is the node's.
func (ns *netns) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := ns.do(func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// command runs name with args inside the namespace (`ip netns exec`,
// which execs it: the process's pid is the command's). The process gets
// SIGKILL if the test process dies first.
func (ns *netns) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns.name, name}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// network is a switch in a namespace of its own and the namespaces of the
// nodes on it.
type network struct {
	prefix string // the first three octets of the nodes' addresses
	swNS   *netns
	sw     *vswitch
	nodes  map[string]*netns
	order  []string
	close  func() // stops the switch, then removes every namespace; once

	addLocked func(name string) (*netns, error)
}

// newNetwork makes the switch's namespace and starts the switch. Its
// close is registered with atCleanup (for a signal); the caller runs it.
func newNetwork(prefix string) (*network, error) {
	swNS, err := addNetns("sw")
	if err != nil {
		return nil, err
	}
	nw := &network{prefix: prefix, swNS: swNS, sw: newSwitch(swNS), nodes: map[string]*netns{}}
	var mu sync.Mutex
	nw.close = atCleanup(func() {
		nw.sw.close()
		mu.Lock()
		defer mu.Unlock()
		for _, name := range nw.order {
			_ = nw.nodes[name].del()
		}
		_ = swNS.del()
	})
	nw.addLocked = func(name string) (*netns, error) {
		mu.Lock()
		defer mu.Unlock()
		ns, err := addNetns(name)
		if err != nil {
			return nil, err
		}
		nw.nodes[name] = ns
		nw.order = append(nw.order, name)
		return ns, nil
	}
	return nw, nil
}

// addr is the address of the i-th node added (from 0).
func (nw *network) addr(i int) string { return fmt.Sprintf("%s.%d", nw.prefix, i+1) }

// add makes a node's namespace and puts it on the switch with the next
// address.
func (nw *network) add(name string) (*netns, error) {
	ns, err := nw.addLocked(name)
	if err != nil {
		return nil, err
	}
	if err := nw.sw.attach(name, ns, nw.addr(len(nw.order)-1)+"/24"); err != nil {
		return nil, err
	}
	return ns, nil
}
