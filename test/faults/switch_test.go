//go:build faults

package faults

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The nodes' namespaces are joined by a switch in a namespace of its own:
// each node's eth0 is one end of a veth pair whose other end is a port of
// the switch. The switch is this process: it reads every frame of a port
// from an AF_PACKET socket and writes it to the port its destination MAC
// was learnt on (or to every other port), after the link's impairment.
// A userspace switch rather than a Linux bridge with tc netem, because
// kernels built without sch_netem (CONFIG_NET_SCH_NETEM unset, as on the
// machine this suite was written on) cannot emulate loss and delay; this
// one works on any kernel with AF_PACKET and veth, and the host's own
// namespace gets no interface at all, so no frame can leave the machine.
//
// Impairments are those of `tc qdisc add dev eth0 root netem loss L delay
// D J` on every node's interface: a frame is dropped with the sending
// node's loss probability and otherwise delayed by the sending node's
// delay plus a uniform jitter in [-J, +J] (so frames can be reordered, as
// with netem). A port that is down drops every frame from and to it (a
// partition).

// vnetHdrLen is the size of the virtio_net_hdr that PACKET_VNET_HDR puts
// before every frame: it carries checksum offload and segmentation
// (GSO) state, so a frame whose checksum the sender left to the device,
// or a UDP GSO super-frame from quic-go, is forwarded whole and the
// kernel of the receiving side finishes it.
const vnetHdrLen = 10

// packetVnetHdr is the PACKET_VNET_HDR socket option (linux/if_packet.h).
const packetVnetHdr = 15

// maxFrame bounds a received frame with its vnet header (a GSO frame is
// at most 64 KiB).
const maxFrame = vnetHdrLen + 65536 + 14

// impairment is what a port does to the frames its node sends.
type impairment struct {
	Loss   float64 // probability of dropping a frame, 0..1
	Delay  time.Duration
	Jitter time.Duration // uniform in [-Jitter, +Jitter]
	Down   bool          // drop every frame from and to the port
	// Cut names the nodes whose frames to and from the port are
	// dropped, both ways: a partition that spares the port's other
	// links.
	Cut []string
}

func (i impairment) String() string {
	if i.Down {
		return "down"
	}
	if len(i.Cut) > 0 {
		return "cut from " + strings.Join(i.Cut, ", ")
	}
	return fmt.Sprintf("loss %.1f%% delay %v±%v", i.Loss*100, i.Delay, i.Jitter)
}

// portStats count a port's frames. Of the frames the port's node sent
// and the switch did not drop, direct ones were written at once and
// delayed ones were put on a timer: with a delay set, every frame must
// be delayed (the self-check counts them).
type portStats struct {
	rx, tx, dropped, gso atomic.Uint64
	direct, delayed      atomic.Uint64
}

// delayStats sum up the delays the switch drew for a port's frames (its
// mechanism: each must lie in [Delay-Jitter, Delay+Jitter]) and how late
// their timers fired past the drawn delay (the machine's share: a timer
// never fires early, but on a loaded machine it fires late).
type delayStats struct {
	n             int // delays drawn
	min, max, sum time.Duration
	fired         int // timers fired
	lateMax       time.Duration
	lateSum       time.Duration
}

func (d delayStats) mean() time.Duration {
	if d.n == 0 {
		return 0
	}
	return d.sum / time.Duration(d.n)
}

func (d delayStats) meanLate() time.Duration {
	if d.fired == 0 {
		return 0
	}
	return d.lateSum / time.Duration(d.fired)
}

type port struct {
	name  string // the switch-side veth
	node  string
	file  *os.File
	raw   syscall.RawConn
	index int

	mu  sync.Mutex // guards imp
	imp impairment

	delaysMu sync.Mutex // guards delays
	delays   delayStats

	stats portStats
}

func (p *port) impairment() impairment {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.imp
}

// drew records a delay drawn for one of the port's frames.
func (p *port) drew(d time.Duration) {
	p.delaysMu.Lock()
	defer p.delaysMu.Unlock()
	if p.delays.n == 0 || d < p.delays.min {
		p.delays.min = d
	}
	p.delays.max = max(p.delays.max, d)
	p.delays.sum += d
	p.delays.n++
}

// fired records how late the timer of one of the port's delayed frames
// fired.
func (p *port) fired(late time.Duration) {
	p.delaysMu.Lock()
	defer p.delaysMu.Unlock()
	p.delays.lateMax = max(p.delays.lateMax, late)
	p.delays.lateSum += late
	p.delays.fired++
}

// takeDelays returns the port's delay figures since the last call and
// starts them again.
func (p *port) takeDelays() delayStats {
	p.delaysMu.Lock()
	defer p.delaysMu.Unlock()
	d := p.delays
	p.delays = delayStats{}
	return d
}

// vswitch is the userspace switch.
type vswitch struct {
	ns *netns

	mu     sync.Mutex // guards ports, macs
	ports  []*port
	macs   map[[6]byte]*port
	closed bool

	wg      sync.WaitGroup // port readers
	pending sync.WaitGroup // delayed frames
}

func newSwitch(ns *netns) *vswitch {
	return &vswitch{ns: ns, macs: map[[6]byte]*port{}}
}

// attach makes a veth pair between node's namespace (eth0 with addr, a
// CIDR) and the switch (port p-<node>), brings both up, and starts
// forwarding the port's frames.
func (s *vswitch) attach(node string, ns *netns, addr string) error {
	name := "p-" + node
	if err := ip("-n", ns.name, "link", "add", "eth0", "type", "veth", "peer", "name", name, "netns", s.ns.name); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"-n", ns.name, "addr", "add", addr, "dev", "eth0"},
		{"-n", ns.name, "link", "set", "eth0", "up"},
		{"-n", s.ns.name, "link", "set", name, "up"},
	} {
		if err := ip(args...); err != nil {
			return err
		}
	}
	p := &port{name: name, node: node}
	err := s.ns.do(func() error {
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			return err
		}
		p.index = ifi.Index
		fd, err := syscall.Socket(syscall.AF_PACKET, syscall.SOCK_RAW|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, int(htons(syscall.ETH_P_ALL)))
		if err != nil {
			return fmt.Errorf("packet socket: %w", err)
		}
		if err := syscall.SetsockoptInt(fd, syscall.SOL_PACKET, packetVnetHdr, 1); err != nil {
			syscall.Close(fd)
			return fmt.Errorf("PACKET_VNET_HDR: %w", err)
		}
		if err := syscall.Bind(fd, &syscall.SockaddrLinklayer{Protocol: htons(syscall.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
			syscall.Close(fd)
			return fmt.Errorf("bind %s: %w", name, err)
		}
		p.file = os.NewFile(uintptr(fd), name)
		return nil
	})
	if err != nil {
		return err
	}
	if p.raw, err = p.file.SyscallConn(); err != nil {
		p.file.Close()
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		p.file.Close()
		return errors.New("switch closed")
	}
	s.ports = append(s.ports, p)
	s.wg.Go(func() { s.read(p) })
	return nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// port returns the port of node, nil if none.
func (s *vswitch) port(node string) *port {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.ports {
		if p.node == node {
			return p
		}
	}
	return nil
}

// impair sets the impairment of node's port ("" = every port).
func (s *vswitch) impair(node string, imp impairment) {
	s.mu.Lock()
	ports := append([]*port(nil), s.ports...)
	s.mu.Unlock()
	for _, p := range ports {
		if node == "" || p.node == node {
			p.mu.Lock()
			p.imp = imp
			p.mu.Unlock()
		}
	}
}

// read forwards the frames of one port until the switch closes.
func (s *vswitch) read(in *port) {
	buf := make([]byte, maxFrame)
	for {
		var (
			n    int
			from syscall.Sockaddr
			rerr error
		)
		err := in.raw.Read(func(fd uintptr) bool {
			n, from, rerr = syscall.Recvfrom(int(fd), buf, 0)
			return rerr != syscall.EAGAIN
		})
		if err == nil {
			err = rerr
		}
		if err != nil {
			if s.isClosed() {
				return
			}
			// A transient error (ENETDOWN while a link is reset); not
			// a busy loop if the interface went away.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if ll, ok := from.(*syscall.SockaddrLinklayer); ok && ll.Pkttype == syscall.PACKET_OUTGOING {
			continue
		}
		if n < vnetHdrLen+14 {
			continue
		}
		in.stats.rx.Add(1)
		if buf[1] != 0 { // gso_type: a super-frame the receiving kernel segments
			in.stats.gso.Add(1)
		}
		s.forward(in, buf[:n])
	}
}

// forward sends one frame (with its vnet header) to where its destination
// lives, after the sending port's impairment.
func (s *vswitch) forward(in *port, frame []byte) {
	var dst, src [6]byte
	copy(dst[:], frame[vnetHdrLen:])
	copy(src[:], frame[vnetHdrLen+6:])
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	if src[0]&1 == 0 {
		s.macs[src] = in
	}
	var outs []*port
	if out, ok := s.macs[dst]; ok && dst[0]&1 == 0 {
		if out != in {
			outs = []*port{out}
		}
	} else {
		for _, p := range s.ports {
			if p != in {
				outs = append(outs, p)
			}
		}
	}
	s.mu.Unlock()
	imp := in.impairment()
	for _, out := range outs {
		oimp := out.impairment()
		cut := slices.Contains(imp.Cut, out.node) || slices.Contains(oimp.Cut, in.node)
		if imp.Down || oimp.Down || cut || (imp.Loss > 0 && rand.Float64() < imp.Loss) {
			in.stats.dropped.Add(1)
			continue
		}
		delay := imp.Delay
		if imp.Jitter > 0 {
			delay += time.Duration(rand.Int64N(int64(2*imp.Jitter)+1)) - imp.Jitter
		}
		if delay <= 0 {
			in.stats.direct.Add(1)
			s.send(out, frame)
			continue
		}
		in.stats.delayed.Add(1)
		in.drew(delay)
		cp := append([]byte(nil), frame...)
		s.pending.Add(1)
		due := time.Now().Add(delay)
		time.AfterFunc(delay, func() {
			defer s.pending.Done()
			in.fired(time.Since(due))
			s.send(out, cp)
		})
	}
}

func (s *vswitch) send(out *port, frame []byte) {
	var werr error
	err := out.raw.Write(func(fd uintptr) bool {
		_, werr = syscall.Write(int(fd), frame)
		return werr != syscall.EAGAIN
	})
	if err == nil && werr == nil {
		out.stats.tx.Add(1)
	}
}

func (s *vswitch) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// close stops every port reader, waits for delayed frames, and closes the
// sockets. The veth pairs go with the namespaces.
func (s *vswitch) close() {
	s.mu.Lock()
	s.closed = true
	ports := s.ports
	s.mu.Unlock()
	for _, p := range ports {
		p.file.Close()
	}
	s.wg.Wait()
	s.pending.Wait()
}

// stats sums the counters of every port.
func (s *vswitch) stats() (rx, tx, dropped, gso uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.ports {
		rx += p.stats.rx.Load()
		tx += p.stats.tx.Load()
		dropped += p.stats.dropped.Load()
		gso += p.stats.gso.Load()
	}
	return
}
