package config

import (
	"strings"
	"testing"
)

// TestControllerVoters: controller.voters names pinned mesh peers, never
// this node, none twice, only on a controller, at most MaxVoters in all.
func TestControllerVoters(t *testing.T) {
	const key1 = "1111111111111111111111111111111111111111111111111111111111111111"
	const key2 = "2222222222222222222222222222222222222222222222222222222222222222"
	base := "node: {name: a}\nmesh:\n  listen: 127.0.0.1:7400\n  peers:\n" +
		"    - {name: b, addr: 127.0.0.2:7400, key: " + key1 + "}\n" +
		"    - {name: c, addr: 127.0.0.3:7400, key: " + key2 + "}\n" +
		"    - {name: d, addr: 127.0.0.4:7400}\n"
	for _, tc := range []struct {
		name, give, want string
	}{
		{"two pinned peers", "controller: {enabled: true, voters: [b, c]}\n", ""},
		{"none", "controller: {enabled: true}\n", ""},
		{"not a controller", "controller: {voters: [b]}\n", "controller.voters: is set but controller.enabled is false"},
		{"unknown peer", "controller: {enabled: true, voters: [x]}\n", `controller.voters[0]: "x" is not the name of a peer in mesh.peers`},
		{"unpinned peer", "controller: {enabled: true, voters: [d]}\n", `controller.voters[0]: peer "d" has no key in mesh.peers`},
		{"this node", "controller: {enabled: true, voters: [a]}\n", `controller.voters[0]: "a" is this node`},
		{"self", "controller: {enabled: true, voters: [self]}\n", `controller.voters[0]: "self" is this node`},
		{"twice", "controller: {enabled: true, voters: [b, b]}\n", `controller.voters[1]: "b" is listed twice (first at controller.voters[0])`},
		{"too many", "controller: {enabled: true, voters: [b, c, b, c, b, c, b]}\n", "8 controllers (this node and 7 voters) are more than 7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(base + tc.give))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			err = c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate: %v; want an error containing %q", err, tc.want)
			}
		})
	}
}
