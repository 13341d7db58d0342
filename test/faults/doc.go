//go:build faults

// Package faults is nodeld's fault suite: real nodeld processes, each in
// a network namespace of its own, joined by a switch that can drop,
// delay and cut their traffic, with a client driving a role port while
// faults are injected. It prints one table (fault, expected, observed,
// figure) and fails on any miss; docs/reliability.md says what nodeld
// promises under each fault and records the figures.
//
// It is built only with the build tag faults, so `go test ./...` does not
// see it; run it as root with `make faults` (go test -tags faults
// ./test/faults/). Without root or network namespaces it skips with the
// reason; with NODELD_FAULTS_REQUIRE=1 (CI) it fails instead.
//
// # What it builds
//
// TestMain builds nodeld (static, as make build does) and the echo-llm
// example once. TestSwitchImpairs checks the instrument: UDP probes
// between two namespaces measure the switch's loss, delay and partition.
// TestFaults starts five nodes (cluster_test.go): a and b serve role chat
// to c from an adopted echo-llm each; c is the consumer; d is b's
// controller for the operator's calls (nodeld ctl place on b goes
// through d); e runs the controller (controller.enabled, a 500 ms tick,
// dead_after 3 s), which declares the echo-llm package as workload gen
// and places it on a or b (their hosts name e's key), whose role gen c
// uses. Peers are keyed and paired; the mesh runs on its shipped
// defaults. The rows of the controllers in raft (9 to 11; raft_test.go)
// run on a second cluster, built once the first is gone (same
// addresses): a, b and c as before, no d, and e, f and g running the
// controller as controller.voters of each other, which a and b list in
// host.controllers; the suite reads the placements through the leader. Each namespace has only loopback and its eth0 on the switch
// (10.213.0.0/24): the host's own namespace gets no interface, so no
// traffic leaves the machine.
//
// # The switch
//
// switch_test.go is a userspace Ethernet switch: one AF_PACKET socket per
// port in a namespace of its own. It impairs what each node sends as
// `tc qdisc ... netem loss L delay D J` on the node's interface would; it
// exists because kernels built without sch_netem cannot run netem.
//
// # Adding a fault
//
// A fault is a row of the faults table (faults_test.go): an id, a name,
// what nodeld promises, and a run that injects the fault, observes,
// returns an outcome and leaves the cluster healthy (waitHealthy: every
// node up and linked, c resolving chat to a and b, and the controller's
// workload settled: one copy, running, served to c). The tools:
// node.process().signal (SIGKILL, SIGSTOP, SIGCONT), node.start and
// restart, cluster.nw.sw.impair(node, impairment{Down: true}) for a
// partition (impairment{Cut: nodes} cuts it from those nodes only), and
// for the controller's faults (controller_test.go)
// procCopies, which counts a package's copies from what runs (processes
// of its binary under a host's data dir, found in /proc, so a frozen or
// cut-off node's copy counts too) rather than from the controller's view.
//
// # Cleanup
//
// Namespaces are named nodeld-faults-<pid>-<node>. Everything the suite
// makes outside its temp dirs (processes, mounts, namespaces) is undone
// at the end of each test, on SIGINT and SIGTERM, and, for a run killed
// outright, by the next run (namespaces of a dead pid, and what runs in
// them); child processes die with the test process (PR_SET_PDEATHSIG).
package faults
