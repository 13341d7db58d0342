package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.yaml.in/yaml/v3"
)

var ignoreUnexported = cmpopts.IgnoreUnexported(Config{}, Duration{})

const (
	keyA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	keyB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	// idB is keyNodeID(keyB): "n-" and the first 16 hex of SHA-256 of the
	// 32 key bytes, computed independently.
	idB = "n-4ca14526b2751b64"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		give string
		want func(c *Config) // applied to Default()
	}{
		{name: "empty file", give: "", want: func(*Config) {}},
		{name: "only comments", give: "# nothing\n", want: func(*Config) {}},
		{name: "null document", give: "---\n", want: func(*Config) {}},
		{name: "null section keeps defaults", give: "log:\nadmin: ~\n", want: func(*Config) {}},
		{
			name: "partial section keeps other defaults",
			give: "log: {level: debug}\n",
			want: func(c *Config) { c.Log.Level = "debug" },
		},
		{
			name: "discovery and a forced log format",
			give: "log: {format: console}\ninference: {discover: true}\n",
			want: func(c *Config) { c.Log.Format = "console"; c.Inference.Discover = true },
		},
		{
			name: "admin.pprof turns the profiles on",
			give: "admin: {pprof: true}\n",
			want: func(c *Config) { c.Admin.Pprof = true },
		},
		{
			name: "null scalar is empty",
			give: "admin:\n  listen:\n",
			want: func(c *Config) { c.Admin.Listen = "" },
		},
		{
			name: "null int and duration are zero",
			give: "mesh: {keepalive: ~, max_inflight_total: ~}\n",
			want: func(c *Config) { c.Mesh.Keepalive = Duration{}; c.Mesh.MaxInflightTotal = 0 },
		},
		{
			name: "string accepts any scalar as written",
			give: "node: {name: 0x1F, data_dir: 123}\n",
			want: func(c *Config) { c.Node.Name = "0x1F"; c.Node.DataDir = "123" },
		},
		{
			name: "anchors without aliases are fine",
			give: "node: {data_dir: &d ./data}\n",
			want: func(c *Config) { c.Node.DataDir = "./data" },
		},
		{
			name: "peer tier defaults to discovered",
			give: "mesh:\n  listen: :7400\n  keepalive: 1m30s\n  peers:\n    - {addr: h:1}\n    - {addr: h:2, tier: pinned}\n",
			want: func(c *Config) {
				c.Mesh.Listen = ":7400"
				c.Mesh.Keepalive = Duration{D: 90 * time.Second}
				c.Mesh.Peers = []Peer{{Addr: "h:1", Tier: TierDiscovered}, {Addr: "h:2", Tier: TierPinned}}
			},
		},
		{
			name: "roles, instances, labels and limits",
			give: `
node: {labels: {rack: a}}
inference:
  roles:
    - {name: chat, listen: 127.0.0.1:1, expose: true, serve_to: [x], use_from: [y, z], concurrency: 3, model_passthrough: true}
  instances:
    - {role: chat, runtime: ollama, url: "http://127.0.0.1:2", model: m}
  limits: {max_body_bytes: 0x10, stall_timeout: 1s, concurrency: 2}
host: {enabled: true, controllers: [k]}
controller: {enabled: true, workloads: [{name: w, package: p, variant: v, node: n}]}
`,
			want: func(c *Config) {
				c.Node.Labels = map[string]string{"rack": "a"}
				c.Inference.Roles = []Role{{Name: "chat", Listen: "127.0.0.1:1", Expose: true, ServeTo: []string{"x"}, UseFrom: []string{"y", "z"}, Concurrency: 3, ModelPassthrough: true}}
				c.Inference.Instances = []Instance{{Role: "chat", Runtime: "ollama", URL: "http://127.0.0.1:2", Model: "m"}}
				c.Inference.Limits.MaxBodyBytes = 16
				c.Inference.Limits.StallTimeout = Duration{D: time.Second}
				c.Inference.Limits.Concurrency = 2
				c.Host.Enabled, c.Host.Controllers = true, []string{"k"}
				c.Controller.Enabled = true
				c.Controller.Workloads = []Workload{{Name: "w", Package: "p", Variant: "v", Node: "n", Replicas: 1}}
			},
		},
		{
			name: "controller policy and workload defaults",
			give: "controller:\n  policy:\n    kinds: {inference: {}, service: {min_tier: pinned}, batch: }\n  workloads:\n    - {name: w, package: p}\n    - {name: x, package: p, replicas: 3}\n",
			want: func(c *Config) {
				c.Controller.Policy.Kinds = map[string]KindRule{
					"inference": {MinTier: TierPaired}, "service": {MinTier: TierPinned}, "batch": {MinTier: TierPaired},
				}
				c.Controller.Workloads = []Workload{{Name: "w", Package: "p", Replicas: 1}, {Name: "x", Package: "p", Replicas: 3}}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.give))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			want := Default()
			tt.want(want)
			if diff := cmp.Diff(want, got, ignoreUnexported); diff != "" {
				t.Errorf("Parse mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		give string
		want []string
	}{
		{
			name: "oversized",
			give: "#" + strings.Repeat("x", MaxConfigBytes),
			want: []string{"config is larger than the limit of 1048576 bytes"},
		},
		{
			name: "second document",
			give: "log: {}\n---\nlog: {}\n",
			want: []string{"line 2: a second YAML document; a config file holds exactly one"},
		},
		{
			name: "root is a list",
			give: "- a\n",
			want: []string{"line 1: expected a mapping, got a list"},
		},
		{
			name: "every unknown key is reported",
			give: "nod: {}\nlog:\n  lvl: x\n  level: info\n  fmt: y\n",
			want: []string{
				"line 1: nod: unknown key; known keys here: node, log, admin, mesh, inference, proxy, host, controller",
				"line 3: log.lvl: unknown key; known keys here: level, format",
				"line 5: log.fmt: unknown key; known keys here: level, format",
			},
		},
		{
			name: "non-scalar key",
			give: "? [a]\n: b\n",
			want: []string{"line 1: keys must be plain strings, got a list"},
		},
		{
			name: "duplicate label",
			give: "node:\n  labels:\n    a: x\n    a: y\n",
			want: []string{"line 4: node.labels.a: duplicate key (first at line 3)"},
		},
		{
			name: "label value is a list",
			give: "node:\n  labels:\n    a: [x]\n",
			want: []string{"line 3: node.labels.a: expected a string, got a list"},
		},
		{
			name: "quoted bool and bool as int",
			give: "host: {enabled: \"true\"}\ncontroller: {enabled: 1}\n",
			want: []string{
				`line 1: host.enabled: expected true or false, got "true"`,
				`line 2: controller.enabled: expected true or false, got "1"`,
			},
		},
		{
			name: "int out of range",
			give: "inference: {limits: {concurrency: 9223372036854775807999}}\n",
			want: []string{`line 1: inference.limits.concurrency: expected an integer, got "9223372036854775807999"`},
		},
		{
			name: "alias",
			give: "log: &l {level: info}\nadmin: *l\n",
			want: []string{"line 2: admin: YAML aliases are not supported; write the value out"},
		},
		{
			name: "syntax",
			give: "log: {level: info\n",
			want: []string{"line 1: invalid YAML: did not find expected ',' or '}'"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.give))
			if err == nil {
				t.Fatalf("Parse = %+v, want error", c)
			}
			var got []string
			for _, e := range flatten(err) {
				var de *DecodeError
				if !errors.As(e, &de) {
					t.Errorf("error %q is %T, want *DecodeError", e, e)
				}
				got = append(got, e.Error())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse errors mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseBadDurationIsForValidate(t *testing.T) {
	c, err := Parse([]byte("controller:\n  tick: soon\n"))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if c.Controller.Tick.Valid() || c.Controller.Tick.String() != "soon" {
		t.Errorf("tick = %+v, want invalid %q kept", c.Controller.Tick, "soon")
	}
	want := `line 2: controller.tick: invalid duration "soon": use a Go duration such as 500ms, 15s or 5m`
	if err := c.Validate(); err == nil || err.Error() != want {
		t.Errorf("Validate = %v, want %q", err, want)
	}
}

func TestLines(t *testing.T) {
	c, err := Parse([]byte(`log:
  level: info
mesh:
  listen: :7400
  peers:
    - name: a
      addr: h:1
inference:
  roles:
    -
      name: chat
      use_from: [a]
node:
  labels: {rack: a}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{
		"log": 1, "log.level": 2,
		"mesh": 3, "mesh.listen": 4, "mesh.peers": 5, "mesh.peers[0]": 6, "mesh.peers[0].name": 6, "mesh.peers[0].addr": 7,
		"inference": 8, "inference.roles": 9, "inference.roles[0]": 11, "inference.roles[0].name": 11,
		"inference.roles[0].use_from": 12, "inference.roles[0].use_from[0]": 12,
		"node": 13, "node.labels": 14, "node.labels.rack": 14,
	}
	if diff := cmp.Diff(want, c.lines); diff != "" {
		t.Errorf("lines mismatch (-want +got):\n%s", diff)
	}
	for path, line := range map[string]int{
		"inference.roles[0].listen":      11, // not in the file: nearest enclosing item
		"mesh.peers[0].tier":             6,
		"mesh.keepalive":                 3,
		"controller.tick":                0,
		"inference.roles[0].use_from[0]": 12,
		"":                               0,
	} {
		if got := c.Line(path); got != line {
			t.Errorf("Line(%q) = %d, want %d", path, got, line)
		}
	}
	if got := Default().Line("log.level"); got != 0 {
		t.Errorf("Default().Line = %d, want 0", got)
	}
}

func TestValidateWithoutLines(t *testing.T) {
	c := Default()
	c.Mesh.Listen = "127.0.0.1:0"
	c.Mesh.Peers = []Peer{{Name: "p", Addr: "h:1"}} // empty tier means discovered
	c.Inference.Roles = []Role{{Name: "chat", Listen: "0.0.0.0:1", UseFrom: []string{"p"}}}
	want := `inference.roles[0].listen: "0.0.0.0:1": host is not a loopback IP address: use 127.0.0.1 or [::1]`
	err := c.Validate()
	if err == nil || err.Error() != want {
		t.Fatalf("Validate = %v, want %q", err, want)
	}
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Line != 0 || ve.Path != "inference.roles[0].listen" {
		t.Errorf("errors.As = %+v, want a ValidationError with path and no line", ve)
	}
	if err := Default().Validate(); err != nil {
		t.Errorf("Default().Validate() = %v", err)
	}
}

func TestValidateReaders(t *testing.T) {
	tests := []struct {
		name string
		give []string
		want []string
	}{
		{name: "keys and names", give: []string{keyA, "a", "b"}},
		{name: "none", give: nil},
		{
			name: "unknown name, node id and short key",
			give: []string{"nobody", idB, "abcd", ""},
			want: []string{
				`host.readers[0]: "nobody" is neither a key (64 hex characters) nor the name of a configured peer`,
				`host.readers[1]: "n-4ca14526b2751b64" is neither a key (64 hex characters) nor the name of a configured peer`,
				`host.readers[2]: "abcd" is neither a key (64 hex characters) nor the name of a configured peer`,
				`host.readers[3]: "" is neither a key (64 hex characters) nor the name of a configured peer`,
			},
		},
		{
			name: "the same node twice",
			give: []string{"a", "a", keyB, "b", strings.ToUpper(keyA), keyA},
			want: []string{
				`host.readers[1]: "a" names the same node as host.readers[0]`,
				`host.readers[3]: "b" names the same node as host.readers[2]`,
				`host.readers[5]: "` + keyA + `" names the same node as host.readers[4]`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			c.Mesh.Listen = "127.0.0.1:0"
			c.Mesh.Peers = []Peer{{Name: "a", Addr: "h:1", Tier: TierPaired}, {Name: "b", Addr: "h:2", Key: keyB, Tier: TierPaired}}
			c.Host.Readers = tt.give
			var got []string
			if err := c.Validate(); err != nil {
				got = strings.Split(err.Error(), "\n")
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Validate (-want +got):\n%s", diff)
			}
		})
	}
}

// Validate refuses what the components refuse later, and only that: the
// listen and instance URL rules are the proxy's and the runner's
// (internal/grammar), and a workload may name a node by any valid node
// name.
func TestValidateAgreesWithComponents(t *testing.T) {
	tests := []struct {
		name   string
		modify func(c *Config)
		want   string // "" = valid
	}{
		{"role listen localhost", func(c *Config) { c.Inference.Roles[0].Listen = "localhost:8090" },
			`inference.roles[0].listen: "localhost:8090": host is not a loopback IP address: use 127.0.0.1 or [::1]`},
		{"admin listen localhost", func(c *Config) { c.Admin.Listen = "localhost:9464" },
			`admin.listen: "localhost:9464": host is not a loopback IP address: use 127.0.0.1 or [::1]`},
		{"ipv4-mapped listen", func(c *Config) { c.Inference.Roles[0].Listen = "[::ffff:127.0.0.1]:8090" }, ""},
		{"instance url with a path", func(c *Config) { c.Inference.Instances[0].URL = "http://[::1]:8080/v1" },
			`inference.instances[0].url: "http://[::1]:8080/v1": only a host and a port are allowed after http:// (no credentials, path, query, fragment or escapes)`},
		{"instance url localhost", func(c *Config) { c.Inference.Instances[0].URL = "http://localhost:8080/" }, ""},
		{"same instance spelled twice", func(c *Config) {
			c.Inference.Instances = append(c.Inference.Instances, Instance{Role: "chat", Runtime: "ollama", URL: "http://localhost:8080"})
		}, `inference.instances[1]: duplicate instance "http://localhost:8080" for role "chat" (first at inference.instances[0])`},
		{"runtime process is not adoptable", func(c *Config) { c.Inference.Instances[0].Runtime = "process" },
			`inference.instances[0].runtime: "process" is not a runtime: use llama.cpp, ollama, mlx-lm or openai`},
		{"upper-case node name", func(c *Config) { c.Node.Name = "GPU-Box" }, ""},
		{"workload on an upper-case node", func(c *Config) {
			c.Controller.Workloads = []Workload{{Name: "w", Package: "p", Node: "GPU-Box", Replicas: 1}}
		}, ""},
		{"upper-case role", func(c *Config) { c.Inference.Roles[0].Name = "Chat"; c.Inference.Instances = nil },
			`inference.roles[0].name: "Chat" is not a valid role name: use 1 to 64 bytes of a-z 0-9 . _ -, each dot-separated part starting with a-z or 0-9`},
		{"leading dash peer", func(c *Config) {
			c.Mesh.Listen = "127.0.0.1:0"
			c.Mesh.Peers = []Peer{{Name: "-p", Addr: "h:1"}}
		}, `mesh.peers[0].name: "-p" is not a valid name: use 1 to 64 bytes of a-z 0-9 . _ -, each dot-separated part starting with a-z or 0-9`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			c.Inference.Roles = []Role{{Name: "chat", Listen: "127.0.0.1:8090"}}
			c.Inference.Instances = []Instance{{Role: "chat", Runtime: "llama.cpp", URL: "http://127.0.0.1:8080"}}
			tt.modify(c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil || err.Error() != tt.want {
				t.Fatalf("Validate = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestNodeIDRef(t *testing.T) {
	for s, want := range map[string]bool{
		"n-0123456789abcdef": true, "n-0123456789ABCDEF": false, "n-0123456789abcde": false,
		"n-0123456789abcdefa": false, "m-0123456789abcdef": false, "n-0123456789abcdeg": false,
	} {
		if got := isNodeIDRef(s); got != want {
			t.Errorf("isNodeIDRef(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestKeyNodeID(t *testing.T) {
	// SHA-256 of 32 zero bytes starts 66687aadf862bd77.
	tests := map[string]string{
		strings.Repeat("00", 32): "n-66687aadf862bd77",
		keyB:                     idB,
		strings.ToUpper(keyB):    idB,
		"abcd":                   "",
		strings.Repeat("zz", 32): "",
	}
	for key, want := range tests {
		if got := keyNodeID(key); got != want {
			t.Errorf("keyNodeID(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestPeerByRef(t *testing.T) {
	c := Default()
	c.Mesh.Peers = []Peer{
		{Name: "a", Addr: "h:1"},
		{Name: "b", Addr: "h:2", Key: keyB},
		{Addr: "h:3", Key: keyA},
	}
	tests := []struct {
		ref    string
		want   Peer
		wantOK bool
	}{
		{ref: "a", want: c.Mesh.Peers[0], wantOK: true},
		{ref: "b", want: c.Mesh.Peers[1], wantOK: true},
		{ref: idB, want: c.Mesh.Peers[1], wantOK: true},
		{ref: keyNodeID(keyA), want: c.Mesh.Peers[2], wantOK: true},
		{ref: strings.ToUpper(idB)},
		{ref: "n-0000000000000000"},
		{ref: "c"},
		{ref: ""},
		{ref: keyB}, // a key is not a ref
	}
	for _, tt := range tests {
		got, ok := c.PeerByRef(tt.ref)
		if ok != tt.wantOK {
			t.Errorf("PeerByRef(%q) ok = %v, want %v", tt.ref, ok, tt.wantOK)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("PeerByRef(%q) mismatch (-want +got):\n%s", tt.ref, diff)
		}
	}
}

func TestDurationYAML(t *testing.T) {
	type doc struct {
		D Duration `yaml:"d"`
	}
	var good doc
	if err := yaml.Unmarshal([]byte("d: 1m30s\n"), &good); err != nil {
		t.Fatal(err)
	}
	if good.D.D != 90*time.Second || !good.D.Valid() {
		t.Errorf("good = %+v, want 90s valid", good.D)
	}
	var bad doc
	if err := yaml.Unmarshal([]byte("d: 15\n"), &bad); err != nil {
		t.Fatalf("bad duration must not fail decoding: %v", err)
	}
	if bad.D.Valid() || bad.D.String() != "15" {
		t.Errorf("bad = %+v, want invalid %q", bad.D, "15")
	}
	if err := yaml.Unmarshal([]byte("d: [1s]\n"), &bad); err == nil {
		t.Error("a list must not decode as a duration")
	}
	out, err := yaml.Marshal(doc{D: Duration{D: 1500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(out); got != "d: 1.5s\n" {
		t.Errorf("Marshal = %q", got)
	}
}

func TestEmbedded(t *testing.T) {
	c, err := LoadEmbedded()
	if err != nil {
		t.Fatalf("LoadEmbedded: %v", err)
	}
	want := Default()
	want.Node.DataDir = "./nodeld-data"
	want.Inference.Roles = []Role{{Name: "chat", Listen: "127.0.0.1:8090"}}
	want.Inference.Instances = []Instance{}
	want.Inference.Discover = true
	if diff := cmp.Diff(want, c, ignoreUnexported, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("embedded default mismatch (-want +got):\n%s", diff)
	}
	if got, want := c.SocketPath(), filepath.Join("nodeld-data", "nodeld.sock"); got != want {
		t.Errorf("SocketPath = %q, want %q", got, want)
	}
	b := Embedded()
	b[0] = 'X'
	if Embedded()[0] == 'X' {
		t.Error("Embedded returned shared bytes")
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("Load(missing) = %v, want a not-exist error naming the file", err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte("#"+strings.Repeat("x", 2*MaxConfigBytes)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(big)
	var fe *FileError
	if !errors.As(err, &fe) || fe.File != big {
		t.Fatalf("Load(big) = %v, want a FileError", err)
	}
	want := "config " + big + ": config is larger than the limit of 1048576 bytes"
	if err.Error() != want {
		t.Errorf("Load(big) = %q, want %q", err, want)
	}
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Errorf("errors.As(DecodeError) failed on %v", err)
	}
	two := filepath.Join(dir, "two.yaml")
	if err := os.WriteFile(two, []byte("log: {level: x, format: y}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(two)
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Path != "log.level" || ve.Line != 1 {
		t.Errorf("Load(two) = %v, want a ValidationError for log.level at line 1", err)
	}
}

// leafPaths lists every key path of t, with [0] for list items.
func leafPaths(t reflect.Type, prefix string) []string {
	idx, keys := fieldIndex(t)
	var out []string
	for _, k := range keys {
		p := joinPath(prefix, k)
		ft := t.Field(idx[k]).Type
		switch {
		case ft == durationType:
			out = append(out, p)
		case ft.Kind() == reflect.Struct:
			out = append(out, leafPaths(ft, p)...)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			out = append(out, p)
			out = append(out, leafPaths(ft.Elem(), p+"[0]")...)
		default:
			out = append(out, p)
		}
	}
	return out
}

// TestExampleHasEveryKey checks that configs/nodeld.yaml sets every key,
// or, for items of lists it leaves empty, shows the key in a comment.
func TestExampleHasEveryKey(t *testing.T) {
	path := filepath.Join("..", "..", "configs", "nodeld.yaml")
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range leafPaths(reflect.TypeFor[Config](), "") {
		if _, ok := c.lines[p]; ok {
			continue
		}
		key := p[strings.LastIndexByte(p, '.')+1:]
		shown := regexp.MustCompile(`#\s+(- )?` + regexp.QuoteMeta(key) + `:`)
		if !strings.Contains(p, "[0]") || !shown.Match(text) {
			t.Errorf("configs/nodeld.yaml does not show %s", p)
		}
	}
	r := c.Inference.Roles
	if len(r) != 1 || r[0].Name != "chat" || r[0].Listen != "127.0.0.1:8090" {
		t.Errorf("roles = %+v, want chat on 127.0.0.1:8090", r)
	}
	in := c.Inference.Instances
	if len(in) != 1 || in[0].Runtime != "llama.cpp" || in[0].URL != "http://127.0.0.1:8080" {
		t.Errorf("instances = %+v, want llama.cpp at http://127.0.0.1:8080", in)
	}
}

func TestClusterExample(t *testing.T) {
	type node struct {
		dataDir, admin, mesh, listen string
		instances                    int
		serveTo, useFrom             []string
	}
	want := map[string]node{
		"a": {"./nodeld-data/a", "127.0.0.1:9465", "127.0.0.1:7401", "127.0.0.1:8091", 1, []string{"c"}, nil},
		"b": {"./nodeld-data/b", "127.0.0.1:9466", "127.0.0.1:7402", "127.0.0.1:8092", 1, []string{"c"}, nil},
		"c": {"./nodeld-data/c", "127.0.0.1:9467", "127.0.0.1:7403", "127.0.0.1:8093", 0, nil, []string{"a", "b"}},
	}
	addrs := map[string]string{"a": "127.0.0.1:7401", "b": "127.0.0.1:7402", "c": "127.0.0.1:7403"}
	for name, w := range want {
		c, err := Load(filepath.Join("..", "..", "configs", "cluster", name+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		r := c.Inference.Roles
		got := node{c.Node.DataDir, c.Admin.Listen, c.Mesh.Listen, "", len(c.Inference.Instances), nil, nil}
		if len(r) == 1 && r[0].Name == "chat" {
			got.listen, got.serveTo, got.useFrom = r[0].Listen, r[0].ServeTo, r[0].UseFrom
		}
		if name == "a" && (!c.Controller.Enabled || c.Controller.Policy.Kinds["inference"].MinTier != TierPaired || !c.Host.Enabled) {
			t.Errorf("a.yaml: controller %+v, host %+v: want the controller with a policy for inference, and a host", c.Controller, c.Host)
		}
		if diff := cmp.Diff(w, got, cmp.AllowUnexported(node{})); diff != "" {
			t.Errorf("%s.yaml mismatch (-want +got):\n%s", name, diff)
		}
		var peers []Peer
		for other, addr := range addrs {
			if other != name {
				tier := TierPaired
				if name == "a" && other == "c" {
					// A's controller places nothing on C, which runs no host.
					tier = TierDiscovered
				}
				peers = append(peers, Peer{Name: other, Addr: addr, Tier: tier})
			}
		}
		if diff := cmp.Diff(peers, c.Mesh.Peers, cmpopts.SortSlices(func(a, b Peer) bool { return a.Name < b.Name })); diff != "" {
			t.Errorf("%s.yaml peers mismatch (-want +got):\n%s", name, diff)
		}
	}
}

func TestProblemsAreCapped(t *testing.T) {
	var b strings.Builder
	for i := range MaxProblems + 50 {
		b.WriteString("k")
		b.WriteString(strings.Repeat("x", i+1))
		b.WriteString(": 1\n")
	}
	_, err := Parse([]byte(b.String()))
	errs := flatten(err)
	if len(errs) != MaxProblems+1 {
		t.Fatalf("Parse reported %d problems, want %d", len(errs), MaxProblems+1)
	}
	if got, want := errs[MaxProblems].Error(), "50 more problems not shown"; got != want {
		t.Errorf("last problem = %q, want %q", got, want)
	}

	c := Default()
	c.Mesh.Listen = ":1"
	for range MaxProblems + 2 {
		c.Inference.Roles = append(c.Inference.Roles, Role{Name: "chat", Listen: "127.0.0.1:0"})
	}
	errs = flatten(c.Validate())
	if len(errs) != MaxProblems+1 || errs[MaxProblems].Error() != "1 more problem not shown" {
		t.Errorf("Validate reported %d problems, last %q", len(errs), errs[len(errs)-1])
	}
}

// admin.pprof is off unless a file turns it on: profiles are an
// operator's choice, never the embedded or decoded default.
func TestPprofOffByDefault(t *testing.T) {
	if Default().Admin.Pprof {
		t.Error("Default() has admin.pprof on")
	}
	c, err := LoadEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	if c.Admin.Pprof {
		t.Error("the embedded default has admin.pprof on")
	}
}

// TestNodeClass: node.class is optional (empty by default), one
// capability word when set, and a bad one is refused with its line and
// the syntax.
func TestNodeClass(t *testing.T) {
	if c := Default(); c.Node.Class != "" {
		t.Fatalf("default class %q, want none", c.Node.Class)
	}
	for _, class := range []string{"dev-mac", "edge_box", "gpu2"} {
		c, err := Parse([]byte("node:\n  data_dir: /tmp/x\n  class: " + class + "\n"))
		if err != nil {
			t.Fatalf("%s: %v", class, err)
		}
		if c.Node.Class != class {
			t.Errorf("class %q, want %q", c.Node.Class, class)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("%s: Validate = %v", class, err)
		}
	}
	for _, class := range []string{"dev.mac", "Dev-Mac", "-dev", "'dev mac'", strings.Repeat("a", 65)} {
		c, err := Parse([]byte("node:\n  data_dir: /tmp/x\n  class: " + class + "\n"))
		if err != nil {
			t.Fatalf("%s: %v", class, err)
		}
		err = c.Validate()
		if err == nil || !strings.Contains(err.Error(), "line 3: node.class: ") ||
			!strings.Contains(err.Error(), "is not a valid node class: use 1 to 64 bytes of a-z 0-9 _ -") {
			t.Errorf("%s: Validate = %v, want node.class refused on line 3", class, err)
		}
	}
}

// TestWorkloadAllowEmulated: controller.workloads[].allow_emulated is
// false unless set.
func TestWorkloadAllowEmulated(t *testing.T) {
	c, err := Parse([]byte("controller:\n  workloads:\n    - name: a\n      package: p\n    - name: b\n      package: p\n      allow_emulated: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if w := c.Controller.Workloads; len(w) != 2 || w[0].AllowEmulated || !w[1].AllowEmulated {
		t.Fatalf("workloads %+v, want a without and b with allow_emulated", w)
	}
}

// TestProxyHoldChecked: proxy.hold refuses negative and absurd values; a
// max_wait of 0 (holding off) is valid.
func TestProxyHoldChecked(t *testing.T) {
	for _, tt := range []struct {
		yaml, want string
	}{
		{"max_wait: -1s", "proxy.hold.max_wait: must not be negative"},
		{"max_wait: 11m", "proxy.hold.max_wait: 11m0s is above the limit"},
		{"queue: -1", "proxy.hold.queue: -1 is out of range"},
		{"queue: 1000000", "proxy.hold.queue: 1000000 is out of range"},
		{"keepalive: 0s", "proxy.hold.keepalive: must be a positive duration"},
		{"keepalive: 2m", "proxy.hold.keepalive: 2m0s is above the limit"},
		{"remember: -5m", "proxy.hold.remember: must be a positive duration"},
		{"remember: 48h", "proxy.hold.remember: 48h0m0s is above the limit"},
		{"max_wait: 0s", ""},
	} {
		c, err := Parse([]byte("proxy:\n  hold:\n    " + tt.yaml + "\n"))
		if err == nil {
			err = c.Validate()
		}
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v, want valid", tt.yaml, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want %q", tt.yaml, err, tt.want)
		}
	}
	d := Default().Proxy.Hold
	if d.MaxWait.D != 30*time.Second || d.Queue != 256 || d.Keepalive.D != 5*time.Second || d.Remember.D != 10*time.Minute {
		t.Errorf("defaults %+v, want 30s, 256, 5s, 10m", d)
	}
}
