package ctl

import (
	"fmt"
	"strconv"
	"strings"
)

// HostAdvertName is the name of the advertisement every workload host
// sends its peers over the mesh, beside its infer.<role> advertisements:
// the host's methods, the highest request version it accepts (VersionTerm
// for a host that fences controllers by term; Version for an older one,
// which refuses their calls) and the HostMeta* metadata.
// The placement table, which may import no ctl, keeps these under the
// same name (table.HostAdvertName); a test of the host holds the two
// equal.
const HostAdvertName = "workload-host"

// Metadata keys of the workload-host advertisement (HostMetadata).
const (
	// HostMetaInstances is the number of instances the host lists
	// (loaded or running), decimal.
	HostMetaInstances = "instances"
	// HostMetaInFlight is the number of places and loads the host is
	// handling right now, decimal.
	HostMetaInFlight = "in_flight"
	// HostMetaEnabled is "true" when the host serves the mutating methods
	// (host.enabled), else "false".
	HostMetaEnabled = "enabled"
	// HostMetaLabelPrefix prefixes each of the node's labels: label.<key>
	// with the label's value.
	HostMetaLabelPrefix = "label."
)

// HostMetadata is what a workload-host advertisement's metadata says: the
// host builds the metadata with Metadata, a controller reads it with
// ParseHostMetadata.
type HostMetadata struct {
	Instances int
	InFlight  int
	Enabled   bool
	// Labels are the node's labels, without the prefix.
	Labels map[string]string
}

// Metadata encodes m as advertisement metadata.
func (m HostMetadata) Metadata() map[string]string {
	md := make(map[string]string, 3+len(m.Labels))
	md[HostMetaInstances] = strconv.Itoa(m.Instances)
	md[HostMetaInFlight] = strconv.Itoa(m.InFlight)
	md[HostMetaEnabled] = strconv.FormatBool(m.Enabled)
	for k, v := range m.Labels {
		md[HostMetaLabelPrefix+k] = v
	}
	return md
}

// ParseHostMetadata decodes a workload-host advertisement's metadata.
// instances and in_flight must be non-negative decimal numbers and
// enabled "true" or "false"; each is required. Keys it does not know are
// ignored, so a newer host may add some. The advertisement's size was
// bounded when it was received (the table's limits).
func ParseHostMetadata(md map[string]string) (HostMetadata, error) {
	count := func(key string) (int, error) {
		s, ok := md[key]
		if !ok {
			return 0, fmt.Errorf("host metadata: no %s", key)
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || strconv.Itoa(n) != s {
			return 0, fmt.Errorf("host metadata: %s is not a count", key)
		}
		return n, nil
	}
	var (
		m   HostMetadata
		err error
	)
	if m.Instances, err = count(HostMetaInstances); err != nil {
		return HostMetadata{}, err
	}
	if m.InFlight, err = count(HostMetaInFlight); err != nil {
		return HostMetadata{}, err
	}
	switch md[HostMetaEnabled] {
	case "true":
		m.Enabled = true
	case "false":
	default:
		return HostMetadata{}, fmt.Errorf("host metadata: %s is not true or false", HostMetaEnabled)
	}
	for k, v := range md {
		if key, ok := strings.CutPrefix(k, HostMetaLabelPrefix); ok && key != "" {
			if m.Labels == nil {
				m.Labels = make(map[string]string)
			}
			m.Labels[key] = v
		}
	}
	return m, nil
}
