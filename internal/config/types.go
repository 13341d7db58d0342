package config

import "time"

// Config is the whole nodeld configuration file. Field names and YAML keys
// are the contract of DESIGN.md "Configuration": keys may be added, never
// renamed.
type Config struct {
	Node       Node       `yaml:"node"`
	Log        Log        `yaml:"log"`
	Admin      Admin      `yaml:"admin"`
	Mesh       Mesh       `yaml:"mesh"`
	Inference  Inference  `yaml:"inference"`
	Proxy      Proxy      `yaml:"proxy"`
	Host       Host       `yaml:"host"`
	Controller Controller `yaml:"controller"`

	// lines maps a dotted key path ("inference.roles[0].listen") to the
	// line it was read from, so Validate can name lines. Empty for
	// configs not decoded from YAML.
	lines map[string]int
}

// Node describes this node.
type Node struct {
	Name    string `yaml:"name"`
	DataDir string `yaml:"data_dir"`
	// Labels become capability records label.<key> in the node's signed
	// facts, so each key is one capability word (grammar.ValidLabelKey).
	Labels map[string]string `yaml:"labels"`
	// Class, when set, becomes the capability record node.class.<class>
	// (claimed) in the node's signed facts: one capability word
	// (grammar.ValidNodeClass). Class dev-mac marks a development machine,
	// which the placement engine ranks in its dev_fallback tier, below
	// every native node. Empty (the default): no class.
	Class string `yaml:"class"`
}

// Log configures the zap logger.
type Log struct {
	Level  string `yaml:"level"`  // debug | info | warn | error
	Format string `yaml:"format"` // auto (console on a terminal, else json) | json | console
}

// Admin configures the read-only admin HTTP listener.
type Admin struct {
	Listen string `yaml:"listen"`
	// Socket is the path of the operator unix socket; empty means
	// <data_dir>/nodeld.sock (see Config.SocketPath).
	Socket string `yaml:"socket"`
	// Pprof serves Go's profiles under /debug/pprof/ on the admin
	// listener (loopback, behind its Host and Origin guard). Off by
	// default; a reload turns it on or off.
	Pprof bool `yaml:"pprof"`
}

// Mesh configures the QUIC mesh.
type Mesh struct {
	Listen    string   `yaml:"listen"` // empty = no mesh
	Keepalive Duration `yaml:"keepalive"`
	// LivenessTimeout is how long a link may hear no liveness heartbeat
	// from its peer before it is closed as dead (independent of the
	// keep-alive, which only keeps NAT and idle timers open).
	LivenessTimeout Duration `yaml:"liveness_timeout"`
	Peers           []Peer   `yaml:"peers"`
	// MaxInflightPerPeer bounds the forwarded requests one peer may have
	// in flight on this node at once.
	MaxInflightPerPeer int `yaml:"max_inflight_per_peer"`
	// MaxInflightTotal bounds the forwarded requests all peers together
	// may have in flight on this node at once.
	MaxInflightTotal int `yaml:"max_inflight_total"`
	// InferTransport carries inference streams: "tcp" (pinned TLS 1.3
	// connections on TCP, served beside QUIC on mesh.listen's port; QUIC
	// the fallback) or "quic" (streams of the mesh link). Restart only.
	InferTransport string `yaml:"infer_transport"`
}

// Inference transports (mesh.infer_transport).
const (
	InferTransportTCP  = "tcp"
	InferTransportQUIC = "quic"
)

// Peer is a configured mesh peer.
type Peer struct {
	Name string `yaml:"name"`
	Addr string `yaml:"addr"`
	Key  string `yaml:"key"`  // 64 hex chars; empty = pinned on first contact
	Tier string `yaml:"tier"` // discovered | paired | pinned; omitted = discovered
}

// Inference configures roles and adopted instances.
type Inference struct {
	Roles     []Role     `yaml:"roles"`
	Instances []Instance `yaml:"instances"`
	Limits    Limits     `yaml:"limits"`
	// ProbeInterval is how often adopted instances are probed; an
	// instance that goes down stops resolving within one interval.
	ProbeInterval Duration `yaml:"probe_interval"`
	// Discover, while Instances is empty, adopts for the first role a
	// model server answering on a well-known loopback port (Ollama,
	// llama-server, LM Studio, vLLM). On in the embedded default, off
	// unless set in a file.
	Discover bool `yaml:"discover"`
}

// Limits bounds the loopback inference proxy. Every value must be positive.
type Limits struct {
	// MaxBodyBytes bounds a request body accepted from a local client.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MeshMaxBodyBytes bounds a request body carried over the mesh.
	MeshMaxBodyBytes int64 `yaml:"mesh_max_body_bytes"`
	// MaxResponseBytes bounds the response body relayed for one request.
	MaxResponseBytes int64 `yaml:"max_response_bytes"`
	// StallTimeout bounds the wait for the upstream response head and
	// every silence between response chunks.
	StallTimeout Duration `yaml:"stall_timeout"`
	// RequestTimeout bounds one forwarded request end to end.
	RequestTimeout Duration `yaml:"request_timeout"`
	// BodyTimeout bounds receiving a client's request body, from the
	// request's start: a client trickling it gets 408 and frees its slot.
	BodyTimeout Duration `yaml:"body_timeout"`
	// Concurrency is the default number of requests one role serves at
	// once; more are answered 429. Role.Concurrency overrides it.
	Concurrency int `yaml:"concurrency"`
	// MaxConnections is how many client connections each role's port
	// holds open at once, idle or busy; one more is closed as soon as it
	// is accepted.
	MaxConnections int `yaml:"max_connections"`
}

// Role is one loopback proxy port for a model role.
type Role struct {
	Name    string   `yaml:"name"`
	Listen  string   `yaml:"listen"`
	Expose  bool     `yaml:"expose"`
	ServeTo []string `yaml:"serve_to"`
	UseFrom []string `yaml:"use_from"`
	// Concurrency overrides Limits.Concurrency for this role; 0 means
	// the default.
	Concurrency int `yaml:"concurrency"`
	// ModelPassthrough keeps the client's "model" on requests to this
	// node's instance, for servers that host several models. By default
	// it is pinned to the instance's model, as on requests served to
	// peers, so a request gets the same answer wherever the role is served.
	ModelPassthrough bool `yaml:"model_passthrough"`
}

// Instance is an adopted model server nodeld probes but does not start.
type Instance struct {
	Role    string `yaml:"role"`
	Runtime string `yaml:"runtime"` // llama.cpp | ollama | mlx-lm | openai
	URL     string `yaml:"url"`
	Model   string `yaml:"model"`
}

// Host configures the workload host.
type Host struct {
	Enabled      bool     `yaml:"enabled"`
	Controllers  []string `yaml:"controllers"`
	TrustAnchors []string `yaml:"trust_anchors"`
	// Readers are the peers, besides the controllers, that may call
	// workload.status and workload.logs: each a 64-hex public key or the
	// name of a configured mesh peer. Every other admitted peer may call
	// describe only.
	Readers []string `yaml:"readers"`
	// Isolation is what placed instances are held to (a restart is
	// needed for a change to take effect).
	Isolation Isolation `yaml:"isolation"`
}

// Isolation configures the isolation of placed instances
// (internal/sandbox). Turning a part off is the operator taking the risk
// the docs name: an instance can then read the node key (filesystem) or
// starve its neighbours (resources).
type Isolation struct {
	// Filesystem confines each instance with Landlock to its package,
	// its scratch directory and the system's libraries and devices: on
	// (the default; a kernel without Landlock refuses every place) or off.
	Filesystem string `yaml:"filesystem"`
	// Resources holds each instance to its manifest's memory and CPU and
	// PidsMax with a cgroup of its own: on (the default; a node that
	// cannot create cgroups refuses instances that declare resources) or
	// off.
	Resources string `yaml:"resources"`
	// Users runs each instance as a uid of its own from UIDRange: auto
	// (the default: when nodeld is root), on (nodeld must be root) or off.
	Users string `yaml:"users"`
	// UIDRange is "first-last": first is the group every instance shares,
	// the others are handed out one per instance.
	UIDRange string `yaml:"uid_range"`
	// PidsMax bounds each instance's processes and threads; 0 means no
	// bound.
	PidsMax int `yaml:"pids_max"`
	// ReadPaths are more absolute paths every instance may read and
	// execute (a runtime installed outside /usr, models kept elsewhere).
	ReadPaths []string `yaml:"read_paths"`
}

// Controller configures the controller loop: where this node places
// workloads, how it watches them, and which it may place at all.
type Controller struct {
	// Enabled runs the controller loop in this daemon (a restart is
	// needed to turn it on or off).
	Enabled bool `yaml:"enabled"`
	// Voters are the other controllers this one is replicated with, by
	// mesh peer name: each must be a peer of mesh.peers with a pinned key.
	// Empty (the default) is a single controller, a one-voter cluster.
	// The voter set changes only with a restart.
	Voters []string `yaml:"voters"`
	// Tick is the period of the lifecycle tick.
	Tick Duration `yaml:"tick"`
	// DeadAfter is how long a target may go without answering before
	// its instances are lost and moved; at least one tick.
	DeadAfter Duration `yaml:"dead_after"`
	// RetryBackoff is the first wait after a failed reschedule; it
	// doubles per failed attempt up to 5m.
	RetryBackoff Duration `yaml:"retry_backoff"`
	// MaxReschedules caps the moves of one workload (placed again on
	// another node) within RescheduleWindow; past it a lost instance
	// stays put with an alert (capped) until a move leaves the window or
	// the operator starts it. A restart on the same node is not a move.
	MaxReschedules int `yaml:"max_reschedules"`
	// RescheduleWindow is how far back moves count towards
	// MaxReschedules.
	RescheduleWindow Duration `yaml:"reschedule_window"`
	// SwapGrace keeps an on-demand instance that served a request this
	// recently from being evicted for another workload (while that one
	// has waited less than 30 s), so a model in use is not swapped out
	// between two requests of one client; 0 swaps at once.
	SwapGrace Duration `yaml:"swap_grace"`
	// DescribeTimeout bounds each describe of a tick, so that a dead node
	// cannot stall one.
	DescribeTimeout Duration `yaml:"describe_timeout"`
	// PlaceTimeout bounds one place call of an operator placement.
	PlaceTimeout Duration `yaml:"place_timeout"`
	// TrustAnchors are the publisher keys whose packages the controller
	// places; empty means host.trust_anchors.
	TrustAnchors []string `yaml:"trust_anchors"`
	// Policy is governance, default deny.
	Policy Policy `yaml:"policy"`
	// Workloads are declared placements, reconciled every tick.
	Workloads []Workload `yaml:"workloads"`
}

// Policy is the controller's governance. Default deny: a workload kind
// not listed in Kinds is placed nowhere, so with no policy nothing is.
type Policy struct {
	// Kinds admits workload kinds (a manifest's kind: inference,
	// service, ...), each on nodes of at least its min_tier.
	Kinds map[string]KindRule `yaml:"kinds"`
	// DenyNodes are nodes (peer names, node ids, or "self") that get no
	// workload.
	DenyNodes []string `yaml:"deny_nodes"`
	// DenyLabels deny every node whose node.labels carry one of these
	// keys with this value ("*": any value).
	DenyLabels map[string]string `yaml:"deny_labels"`
}

// KindRule admits one workload kind.
type KindRule struct {
	// MinTier is the lowest peer tier the kind may be placed on:
	// discovered, paired (the default) or pinned.
	MinTier string `yaml:"min_tier"`
}

// Workload is a declared placement the controller reconciles.
type Workload struct {
	// Name names the workload (unique); it goes into each instance's
	// config, so two workloads of one package get distinct instances.
	Name string `yaml:"name"`
	// Package is the package id, looked up in the controller's store.
	Package string `yaml:"package"`
	// Version pins a version; empty means the newest in the store.
	Version string `yaml:"version"`
	// Variant names a package variant; empty lets the engine choose.
	Variant string `yaml:"variant"`
	// Node pins the workload to one node (a peer name, a node id, or
	// "self").
	Node string `yaml:"node"`
	// Prefer and Avoid are nodes the engine prefers or avoids within the
	// best tier.
	Prefer []string `yaml:"prefer"`
	Avoid  []string `yaml:"avoid"`
	// Replicas is the number of instances kept, each on a distinct node;
	// 1 when the key is omitted.
	Replicas int `yaml:"replicas"`
	// AllowEmulated lets the controller place an emulated variant (a
	// manifest's execution: emulated) when no node fits a native one;
	// false (the default) places native variants only.
	AllowEmulated bool `yaml:"allow_emulated"`
	// OnDemand makes the workload run 0 instances until a request needs
	// it (up to Replicas) and unload again when idle; the zero value (not
	// enabled) keeps it placed all the time.
	OnDemand OnDemand `yaml:"on_demand"`
}

// Duration is a Go duration written as a string ("500ms", "15s", "5m").
type Duration struct {
	D time.Duration
	// raw is the text as written, kept so Validate can report a bad value.
	raw string
	bad bool
}
