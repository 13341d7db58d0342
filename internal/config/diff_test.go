package config

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestChanged(t *testing.T) {
	base := func() *Config {
		c := Default()
		c.Mesh.Listen = "127.0.0.1:7400"
		c.Mesh.Peers = []Peer{{Name: "a", Addr: "h:1", Tier: TierPaired}}
		c.Inference.Roles = []Role{{Name: "chat", Listen: "127.0.0.1:8090"}}
		return c
	}
	tests := []struct {
		name   string
		change func(c *Config)
		old    *Config
		want   Diff
	}{
		{name: "identical", change: func(*Config) {}},
		{
			name:   "same duration written differently",
			change: func(c *Config) { c.Mesh.Keepalive = Duration{D: 15 * time.Second, raw: "15000ms"} },
		},
		{
			name:   "nil and empty lists are equal",
			change: func(c *Config) { c.Host.Controllers = []string{}; c.Node.Labels = map[string]string{} },
		},
		{
			name:   "log level",
			change: func(c *Config) { c.Log.Level = "debug" },
			want:   Diff{Sections: []string{"log"}, Fields: []string{"log.level"}},
		},
		{
			name: "mesh listen and peers",
			change: func(c *Config) {
				c.Mesh.Listen = "127.0.0.1:7500"
				c.Mesh.Peers[0].Tier = TierPinned
			},
			want: Diff{Sections: []string{"mesh"}, Fields: []string{"mesh.listen", "mesh.peers"}, Restart: []string{"mesh.listen"}},
		},
		{
			name: "restart fields in file order",
			change: func(c *Config) {
				c.Admin.Socket = "/run/nodeld.sock"
				c.Node.DataDir = "/srv/nodeld"
				c.Admin.Listen = "127.0.0.1:9999"
			},
			want: Diff{
				Sections: []string{"node", "admin"},
				Fields:   []string{"node.data_dir", "admin.listen", "admin.socket"},
				Restart:  []string{"node.data_dir", "admin.listen", "admin.socket"},
			},
		},
		{
			name: "roles, limits and labels",
			change: func(c *Config) {
				c.Inference.Roles[0].UseFrom = []string{"a"}
				c.Inference.Limits.StallTimeout = Duration{D: time.Second}
				c.Node.Labels = map[string]string{"rack": "b"}
			},
			want: Diff{
				Sections: []string{"node", "inference"},
				Fields:   []string{"node.labels", "inference.roles", "inference.limits"},
			},
		},
		{
			name:   "controller workloads",
			change: func(c *Config) { c.Controller.Workloads = []Workload{{Name: "w", Package: "p"}} },
			want:   Diff{Sections: []string{"controller"}, Fields: []string{"controller.workloads"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old, new := base(), base()
			tt.change(new)
			got := Changed(old, new)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Changed mismatch (-want +got):\n%s", diff)
			}
			if got.Empty() != (len(tt.want.Sections) == 0) || got.NeedsRestart() != (len(tt.want.Restart) > 0) {
				t.Errorf("Empty() = %v, NeedsRestart() = %v for %+v", got.Empty(), got.NeedsRestart(), got)
			}
			for _, f := range tt.want.Fields {
				if !got.Has(f) {
					t.Errorf("Has(%q) = false", f)
				}
			}
		})
	}
	if d := Changed(nil, &Config{}); !d.Empty() {
		t.Errorf("Changed(nil, zero) = %+v, want empty", d)
	}
	if d := Changed(nil, Default()); !d.Has("log.level") || d.Has("host.controllers") {
		t.Errorf("Changed(nil, Default()) = %+v", d)
	}
}

func TestChangedFromFiles(t *testing.T) {
	a, err := Parse([]byte("mesh: {keepalive: 1m}\nlog: {level: info}\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse([]byte("# reordered, same values\nlog:\n  level: info\nmesh:\n  keepalive: 60s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d := Changed(a, b); !d.Empty() {
		t.Errorf("Changed = %+v, want empty", d)
	}
}

// TestRestartOnly: every restart-only key is a field of the config, the
// list is in file order, and a change to any one of them is named by the
// diff and refused by RestartError in those words.
func TestRestartOnly(t *testing.T) {
	keys := RestartOnly()
	var order []string
	sidx, sections := fieldIndex(reflect.TypeFor[Config]())
	for _, s := range sections {
		_, fields := fieldIndex(reflect.TypeFor[Config]().Field(sidx[s]).Type)
		for _, f := range fields {
			if slices.Contains(keys, s+"."+f) {
				order = append(order, s+"."+f)
			}
		}
	}
	if !slices.Equal(order, keys) {
		t.Fatalf("RestartOnly() = %q; as config fields in file order: %q", keys, order)
	}
	for _, key := range keys {
		old, new := Default(), Default()
		section, field, _ := strings.Cut(key, ".")
		sv := reflect.ValueOf(new).Elem().Field(fieldIndexOf(t, reflect.TypeFor[Config](), section))
		fv := sv.Field(fieldIndexOf(t, sv.Type(), field))
		switch fv.Kind() {
		case reflect.String:
			fv.SetString(fv.String() + "x")
		case reflect.Bool:
			fv.SetBool(!fv.Bool())
		case reflect.Slice: // controller.voters
			fv.Set(reflect.Append(fv, reflect.ValueOf("x")))
		case reflect.Struct: // host.isolation: its first key
			f := fv.Field(0)
			f.SetString(f.String() + "x")
		default:
			t.Fatalf("%s: no change for a %s in this test", key, fv.Kind())
		}
		d := Changed(old, new)
		if !slices.Equal(d.Restart, []string{key}) {
			t.Errorf("change of %s: Restart = %q", key, d.Restart)
		}
		if err := d.RestartError(); err == nil || err.Error() != key+" changes only with a restart" {
			t.Errorf("change of %s: RestartError = %v", key, err)
		}
	}
	d := Diff{Restart: []string{"node.data_dir", "mesh.listen"}}
	if err := d.RestartError(); err == nil || err.Error() != "node.data_dir, mesh.listen change only with a restart" {
		t.Errorf("RestartError = %v", err)
	}
	if err := (Diff{Fields: []string{"log.level"}}).RestartError(); err != nil {
		t.Errorf("RestartError = %v for a change that reloads", err)
	}
}

func fieldIndexOf(t *testing.T, typ reflect.Type, key string) int {
	t.Helper()
	idx, _ := fieldIndex(typ)
	i, ok := idx[key]
	if !ok {
		t.Fatalf("%s has no key %q", typ, key)
	}
	return i
}
