// Command demo is `make demo`: nodeld moving a workload off a node that
// dies, narrated in the terminal, in well under two minutes.
//
// It starts three real nodeld processes. A runs the controller, with the
// echo-llm example package in its store and declared as workload "chat"
// (preferring B), and a workload host of its own; B is a workload host
// that lets A place there; C has no model and uses role chat from A or B
// over the mesh. A client loops on C's role port and prints which node
// answered each request. Once B serves, the demo kills B with SIGKILL,
// narrates A's controller noticing (controller.dead_after), placing the
// workload again on A, and C's requests moving there; then it starts B
// again and shows that the copy B held is unloaded, so that exactly one
// copy runs.
//
// As root, each node runs in a network namespace of its own
// (nodeld-demo-<pid>-a, -b, -c), linked by veth pairs to a kernel bridge
// in a fourth namespace: the host's own interfaces are never touched and
// no traffic can leave the machine. Otherwise (or with -mode loopback)
// the nodes are processes on 127.0.0.11, .12 and .13.
//
// It exits 0 when the workload moved and, at the end, exactly one copy
// runs; non-zero otherwise (CI runs it). Everything it makes (processes,
// namespaces, the temp dir) is removed on exit and on Ctrl-C or SIGTERM;
// the namespaces and processes of a run killed outright are removed by
// the next run.
//
//	demo [-nodeld build/nodeld] [-package build/packages/echo-llm]
//	     [-mode auto|netns|loopback] [-keep]
//
// `demo client -url URL` is the client loop (run by the demo, in C's
// namespace when there is one): one request every -every, one line each.
//
// It imports nothing of nodeld's: it drives the nodeld binary as a user
// would.
package main
