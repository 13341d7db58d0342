package config

import (
	_ "embed"
	"path/filepath"
	"time"
)

// defaultYAML is the embedded default config file. It is a string so that
// no caller can modify it.
//
//go:embed default.yaml
var defaultYAML string

// Default returns the base every config file is decoded onto: the values
// a key takes when the file omits it. It is not a runnable config by
// itself (it has no roles); Embedded is.
func Default() *Config {
	return &Config{
		Node:  Node{DataDir: DefaultDataDir},
		Log:   Log{Level: "info", Format: "auto"},
		Admin: Admin{Listen: DefaultAdminListen},
		Mesh: Mesh{
			Keepalive:          Duration{D: 15 * time.Second},
			LivenessTimeout:    Duration{D: 2 * time.Second},
			MaxInflightPerPeer: DefaultMaxInflightPerPeer,
			MaxInflightTotal:   DefaultMaxInflightTotal,
			InferTransport:     InferTransportTCP,
		},
		Inference: Inference{ProbeInterval: Duration{D: 5 * time.Second}, Limits: Limits{
			MaxBodyBytes:     DefaultMaxBodyBytes,
			MeshMaxBodyBytes: DefaultMeshMaxBodyBytes,
			MaxResponseBytes: DefaultMaxResponseBytes,
			StallTimeout:     Duration{D: 120 * time.Second},
			RequestTimeout:   Duration{D: 900 * time.Second},
			BodyTimeout:      Duration{D: 30 * time.Second},
			Concurrency:      DefaultConcurrency,
			MaxConnections:   DefaultMaxConnections,
		}},
		Proxy: defaultProxy(),
		Controller: Controller{
			Tick:             Duration{D: 5 * time.Second},
			DeadAfter:        Duration{D: 30 * time.Second},
			RetryBackoff:     Duration{D: 10 * time.Second},
			MaxReschedules:   DefaultMaxReschedules,
			RescheduleWindow: Duration{D: time.Hour},
			SwapGrace:        Duration{D: 2 * time.Second},
			DescribeTimeout:  Duration{D: 3 * time.Second},
			PlaceTimeout:     Duration{D: 280 * time.Second},
		},
		Host: Host{Isolation: Isolation{
			Filesystem: "on", Resources: "on", Users: "auto",
			UIDRange: DefaultUIDRange, PidsMax: DefaultPidsMax,
		}},
	}
}

// DefaultUIDRange is host.isolation.uid_range's default: 65536 ids in
// the range systemd leaves unused (above its container range, below
// 2^31), so they meet no login, system or DynamicUser= account.
const DefaultUIDRange = "1879048192-1879113727"

// DefaultPidsMax is host.isolation.pids_max's default.
const DefaultPidsMax = 4096

// Embedded returns a copy of the embedded default config file: a single
// node, loopback only, data in ./nodeld-data, admin on 127.0.0.1:9464, no
// mesh, one role "chat" on 127.0.0.1:8090 with no instance configured but
// discovery on (a local model server on a well-known port serves it), host
// and controller disabled.
func Embedded() []byte { return []byte(defaultYAML) }

// LoadEmbedded decodes and validates the embedded default config.
func LoadEmbedded() (*Config, error) {
	c, err := Check(Embedded())
	if err != nil {
		return nil, &FileError{File: "(embedded default)", Errs: flatten(err)}
	}
	return c, nil
}

// SocketPath returns the operator socket path: admin.socket, or
// <data_dir>/nodeld.sock when it is empty.
func (c *Config) SocketPath() string {
	if c.Admin.Socket != "" {
		return c.Admin.Socket
	}
	return filepath.Join(c.Node.DataDir, SocketName)
}

// ConcurrencyFor returns the concurrency limit of role r: its own
// override, else the default of l.
func (l Limits) ConcurrencyFor(r Role) int {
	if r.Concurrency > 0 {
		return r.Concurrency
	}
	return l.Concurrency
}
