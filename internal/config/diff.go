package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// restartOnly are the keys that take effect only when nodeld restarts, in
// file order: the data directory, the listeners bound once at start, the
// log encoding, the isolation of placed instances, whether the controller
// runs and with which voters. This is the one list: a reload refuses a change to any
// of them (Diff.Restart, RestartError) and the docs name the same keys.
var restartOnly = []string{
	"node.data_dir",
	"log.format",
	"admin.listen",
	"admin.socket",
	"mesh.listen",
	"mesh.infer_transport",
	"host.isolation",
	"controller.enabled",
	"controller.voters",
}

// RestartOnly returns the keys that take effect only on restart, in file
// order.
func RestartOnly() []string { return slices.Clone(restartOnly) }

// needsRestart reports whether a field takes effect only when nodeld
// restarts.
func needsRestart(key string) bool { return slices.Contains(restartOnly, key) }

// Diff describes what changed between two configs, for a reload to apply
// or refuse. Lists are in file order and empty when nothing changed.
type Diff struct {
	// Sections are the top-level keys whose values differ ("node",
	// "mesh", ...).
	Sections []string
	// Fields are the second-level keys whose values differ
	// ("mesh.peers", "inference.limits", "log.level").
	Fields []string
	// Restart are the changed Fields that take effect only on restart
	// (RestartOnly). A reload with any of them refuses (RestartError).
	Restart []string
}

// RestartError is the refusal of a reload that changes keys that take
// effect only on restart ("mesh.listen changes only with a restart"), nil
// when it changes none.
func (d Diff) RestartError() error {
	switch len(d.Restart) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%s changes only with a restart", d.Restart[0])
	}
	return fmt.Errorf("%s change only with a restart", strings.Join(d.Restart, ", "))
}

// Empty reports whether nothing changed.
func (d Diff) Empty() bool { return len(d.Sections) == 0 }

// NeedsRestart reports whether a changed field takes effect only on
// restart.
func (d Diff) NeedsRestart() bool { return len(d.Restart) > 0 }

// Has reports whether the section or field key ("mesh", "mesh.peers")
// changed.
func (d Diff) Has(key string) bool {
	return slices.Contains(d.Sections, key) || slices.Contains(d.Fields, key)
}

// Changed compares two configs. Values are compared as decoded: a
// duration by its value ("60s" equals "1m"), an absent list equals an
// empty one, and line numbers are ignored. A nil config counts as the
// zero Config.
func Changed(old, new *Config) Diff {
	if old == nil {
		old = &Config{}
	}
	if new == nil {
		new = &Config{}
	}
	var d Diff
	ov, nv := reflect.ValueOf(old).Elem(), reflect.ValueOf(new).Elem()
	idx, sections := fieldIndex(ov.Type())
	for _, section := range sections {
		oldSec, newSec := ov.Field(idx[section]), nv.Field(idx[section])
		fidx, fields := fieldIndex(oldSec.Type())
		changed := false
		for _, f := range fields {
			if equalValues(oldSec.Field(fidx[f]), newSec.Field(fidx[f])) {
				continue
			}
			changed = true
			key := section + "." + f
			d.Fields = append(d.Fields, key)
			if needsRestart(key) {
				d.Restart = append(d.Restart, key)
			}
		}
		if changed {
			d.Sections = append(d.Sections, section)
		}
	}
	return d
}

// equalValues compares exported fields only (so a Duration compares by
// value, not by how it was written) and treats nil and empty lists and
// maps as equal.
func equalValues(a, b reflect.Value) bool {
	switch a.Kind() {
	case reflect.Struct:
		for i := range a.NumField() {
			if !a.Type().Field(i).IsExported() {
				continue
			}
			if !equalValues(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Slice:
		if a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !equalValues(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.Len() != b.Len() {
			return false
		}
		it := a.MapRange()
		for it.Next() {
			bv := b.MapIndex(it.Key())
			if !bv.IsValid() || !equalValues(it.Value(), bv) {
				return false
			}
		}
		return true
	default:
		return a.Equal(b)
	}
}
