package config

import (
	"strings"
	"testing"
)

const refsYAML = `node:
  name: home
mesh:
  listen: 127.0.0.1:7400
  peers:
    - name: keyed
      addr: 127.0.0.1:7401
      key: %KEY%
    - name: tofu
      addr: 127.0.0.1:7402
    - name: later
      addr: 127.0.0.1:7403
controller:
  enabled: true
  workloads:
    - name: chat
      package: qwen
      node: nobody
    - name: embed
      package: bge
      prefer: [keyed, tofu, later, self, home, n-1111111111111111, n-2222222222222222]
      avoid: [n-3333333333333333, ghost]
`

// TestResolveNodeRef resolves every form the one way, and CheckNodeRefs
// refuses exactly the references that name no known node, each at its
// line.
func TestResolveNodeRef(t *testing.T) {
	key := strings.Repeat("ab", 32)
	keyedID := keyNodeID(key)
	cfg, err := Parse([]byte(strings.ReplaceAll(refsYAML, "%KEY%", key)))
	if err != nil {
		t.Fatal(err)
	}
	known := KnownNodes{SelfID: "n-1111111111111111", Pinned: map[string]string{"127.0.0.1:7402": "n-2222222222222222"}}
	for _, tc := range []struct {
		ref  string
		id   string
		kind RefKind
	}{
		{"self", "n-1111111111111111", RefSelf},
		{"home", "n-1111111111111111", RefSelf},
		{"n-1111111111111111", "n-1111111111111111", RefSelf},
		{"keyed", keyedID, RefPeer},
		{keyedID, keyedID, RefPeer},
		{"tofu", "n-2222222222222222", RefPeer},
		{"n-2222222222222222", "n-2222222222222222", RefPeer},
		{"later", "later", RefPending},
		{"ghost", "ghost", RefUnknown},
		{"n-3333333333333333", "n-3333333333333333", RefUnknown},
		{"", "", RefUnknown},
	} {
		id, kind := ResolveNodeRef(cfg, known, tc.ref)
		if id != tc.id || kind != tc.kind {
			t.Errorf("ResolveNodeRef(%q) = %q, %d; want %q, %d", tc.ref, id, kind, tc.id, tc.kind)
		}
	}

	errs := CheckNodeRefs(cfg, known)
	var got []string
	for _, e := range errs {
		got = append(got, e.Error())
	}
	want := []string{
		`line 18: controller.workloads[0].node: "nobody" names no known node`,
		`line 22: controller.workloads[1].avoid[0]: "n-3333333333333333" names no known node`,
		`line 22: controller.workloads[1].avoid[1]: "ghost" names no known node`,
	}
	if len(got) != len(want) {
		t.Fatalf("CheckNodeRefs = %q, want %d problems", got, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %d = %q, want it to start %q", i, got[i], want[i])
		}
	}

	// Without this node's key or the pins, an id they would name is
	// refused with the hint of what was not read.
	errs = CheckNodeRefs(cfg, KnownNodes{})
	text := ""
	for _, e := range errs {
		text += e.Error() + "\n"
	}
	if !strings.Contains(text, `"n-1111111111111111" names no known node`) || !strings.Contains(text, "its key in node.data_dir was not read") {
		t.Errorf("without KnownNodes:\n%s", text)
	}
}
