package plane

// This file tells a governance denial from an engine's "no eligible
// node": a kind the policy does not admit, or a place whose every node
// (the pinned one alone, when pinned) the policy denies, is refused by
// governance with the policy's reason, not reported as unplaceable.

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nodeld/nodeld/internal/engine"
)

// policyNodeDenial is the policy's reason to deny node n any workload
// (policy.deny_nodes, policy.deny_labels), "" when it does not.
func policyNodeDenial(p Policy, n *nodeState) string {
	if slices.Contains(p.DenyNodes, n.target.ID) {
		return "node is in policy.deny_nodes"
	}
	if n.facts == nil {
		return ""
	}
	keys := make([]string, 0, len(p.DenyLabels))
	for k := range p.DenyLabels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v, has := n.facts.facts.Labels[k]
		if want := p.DenyLabels[k]; has && (want == "*" || want == v) {
			return fmt.Sprintf("label %s=%s is in policy.deny_labels", k, v)
		}
	}
	return ""
}

// kindDenial is the policy's reason to place a workload of kind nowhere,
// "" when the kind is admitted.
func kindDenial(p Policy, kind string) string {
	if _, ok := p.Kinds[kind]; ok {
		return ""
	}
	return fmt.Sprintf("kind %q is not admitted by the policy (controller.policy.kinds; default deny)", kind)
}

// governanceDenial is why governance, not the engine, placed nothing for
// a decision on a workload of kind: the kind is not admitted, or every
// node the decision could use (the pin alone, when pinned) is denied by
// the policy. "" when the decision placed, or when something else than
// the policy stood in the way somewhere.
func (c *reconciler) governanceDenial(kind string, dec engine.Decision) string {
	pol := c.conf().Policy
	if why := kindDenial(pol, kind); why != "" {
		return why
	}
	if dec.Chosen != nil || len(dec.Candidates) == 0 {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var whys []string
	for _, cd := range dec.Candidates {
		if dec.Pin != "" && cd.Node != dec.Pin {
			continue
		}
		n := c.nodes[cd.Node]
		if n == nil {
			return ""
		}
		why := policyNodeDenial(pol, n)
		if why == "" {
			return ""
		}
		whys = append(whys, cd.Node+": "+why)
	}
	if len(whys) == 0 {
		return ""
	}
	return "denied by the policy: " + strings.Join(whys, "; ")
}

// declUnplaceable is the reason a declared workload's decision placed
// nothing: the policy's, prefixed "governance: ", when governance denied
// it, else the engine's (unplaceable).
func (c *reconciler) declUnplaceable(p Package, dec engine.Decision, err error) string {
	if why := c.governanceDenial(p.Verified().Manifest.Kind, dec); why != "" {
		return "governance: " + why
	}
	return unplaceable(dec, err)
}
