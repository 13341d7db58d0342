package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// DecodeError is one problem found while decoding a config file: a YAML
// syntax error, an unknown or duplicate key, or a value of the wrong
// shape. Line is 0 when the problem has no line (an oversized file) and
// Path is empty when it concerns the whole document.
type DecodeError struct {
	Line int
	Path string
	Msg  string
}

// Error formats the problem as "line N: <path>: <message>", leaving out
// the parts that are unknown.
func (e *DecodeError) Error() string { return formatProblem(e.Line, e.Path, e.Msg) }

func formatProblem(line int, path, msg string) string {
	var b strings.Builder
	if line > 0 {
		b.WriteString("line ")
		b.WriteString(strconv.Itoa(line))
		b.WriteString(": ")
	}
	if path != "" {
		b.WriteString(path)
		b.WriteString(": ")
	}
	b.WriteString(msg)
	return b.String()
}

// Parse decodes one YAML document onto Default() strictly and does not
// validate. Every problem is reported in one run: the error is a
// *DecodeError or an errors.Join of them, each "line N: <path>: ...".
//
// Decoding rules: an unknown key, a duplicate key, an alias (*name), a
// second document or a value of the wrong kind is an error. An omitted
// key keeps its default; an explicit null ("key:" or "key: ~") sets a
// scalar or list to its zero value and leaves a section's defaults
// alone. A string key accepts any scalar as written; a boolean needs
// true or false; an integer needs a YAML integer. A duration that does
// not parse is kept as written and reported by Validate. A peer without
// a tier gets DefaultTier, a declared workload without replicas 1 (and its on_demand keys
// their defaults, see OnDemand), and a
// policy kind without min_tier DefaultMinTier.
func Parse(data []byte) (*Config, error) {
	c, errs := decode(data)
	if len(errs) > 0 {
		return nil, errors.Join(capProblems(errs, func(msg string) error { return &DecodeError{Msg: msg} })...)
	}
	return c, nil
}

// decode returns the config decoded so far along with every problem, so
// that Check can add Validate's findings in the same run.
func decode(data []byte) (*Config, []error) {
	c := Default()
	c.lines = make(map[string]int)
	if len(data) > MaxConfigBytes {
		return c, []error{&DecodeError{Msg: fmt.Sprintf("config is larger than the limit of %d bytes", MaxConfigBytes)}}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return c, nil // an empty file is all defaults
		}
		return c, []error{syntaxError(err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return c, []error{syntaxError(err)}
		}
		return c, []error{&DecodeError{Line: extra.Line, Msg: "a second YAML document; a config file holds exactly one"}}
	}
	d := &decoder{lines: c.lines}
	if len(doc.Content) == 1 {
		d.value(doc.Content[0], reflect.ValueOf(c).Elem(), "")
	}
	for i := range c.Mesh.Peers {
		if c.Mesh.Peers[i].Tier == "" {
			c.Mesh.Peers[i].Tier = DefaultTier
		}
	}
	for i := range c.Controller.Workloads {
		if _, set := c.lines["controller.workloads["+strconv.Itoa(i)+"].replicas"]; !set {
			c.Controller.Workloads[i].Replicas = 1
		}
		c.onDemandDefaults(i)
	}
	for k, r := range c.Controller.Policy.Kinds {
		if r.MinTier == "" {
			r.MinTier = DefaultMinTier
			c.Controller.Policy.Kinds[k] = r
		}
	}
	return c, d.errs
}

// syntaxError turns a yaml.v3 parse error ("yaml: line 3: ...") into a
// *DecodeError with the line split out.
func syntaxError(err error) *DecodeError {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, tail, ok := strings.Cut(rest, ": "); ok {
			if n, convErr := strconv.Atoi(num); convErr == nil {
				line, msg = n, tail
			}
		}
	}
	return &DecodeError{Line: line, Msg: "invalid YAML: " + msg}
}

var durationType = reflect.TypeFor[Duration]()

// decoder walks a yaml.Node tree alongside the Config type, setting
// fields, recording the line of every key and collecting every problem.
// Its recursion depth is bounded by the depth of the Config type: values
// under unknown keys are never visited.
type decoder struct {
	lines map[string]int
	errs  []error
}

func (d *decoder) fail(n *yaml.Node, path, format string, args ...any) {
	d.errs = append(d.errs, &DecodeError{Line: n.Line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "null"
		}
		return fmt.Sprintf("%q", n.Value)
	default:
		return "an unexpected node"
	}
}

func (d *decoder) value(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind == yaml.AliasNode {
		d.fail(n, path, "YAML aliases are not supported; write the value out")
		return
	}
	if v.Type() == durationType {
		if n.Kind != yaml.ScalarNode {
			d.fail(n, path, "expected a duration such as 15s, got %s", kindName(n))
			return
		}
		// UnmarshalYAML never fails on a scalar: a bad text is kept for
		// Validate.
		_ = v.Addr().Interface().(*Duration).UnmarshalYAML(n)
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		d.mapping(n, v, path)
	case reflect.Slice:
		d.sequence(n, v, path)
	case reflect.Map:
		d.stringMap(n, v, path)
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			d.fail(n, path, "expected a string, got %s", kindName(n))
			return
		}
		if isNull(n) {
			v.SetString("")
			return
		}
		v.SetString(n.Value)
	case reflect.Bool:
		switch {
		case isNull(n):
			v.SetBool(false)
		case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool":
			var b bool
			if err := n.Decode(&b); err != nil {
				d.fail(n, path, "expected true or false, got %s", kindName(n))
				return
			}
			v.SetBool(b)
		default:
			d.fail(n, path, "expected true or false, got %s", kindName(n))
		}
	case reflect.Int, reflect.Int64:
		switch {
		case isNull(n):
			v.SetInt(0)
		case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int":
			var i int64
			if err := n.Decode(&i); err != nil || v.OverflowInt(i) {
				d.fail(n, path, "integer %s is out of range", kindName(n))
				return
			}
			v.SetInt(i)
		default:
			d.fail(n, path, "expected an integer, got %s", kindName(n))
		}
	default:
		// Unreachable for the Config type; a new field kind needs a case.
		d.fail(n, path, "field of kind %s cannot be decoded", v.Kind())
	}
}

// fieldIndex maps the YAML keys of struct type t to field indexes.
func fieldIndex(t reflect.Type) (map[string]int, []string) {
	idx := make(map[string]int, t.NumField())
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if key == "" || key == "-" {
			continue
		}
		idx[key] = i
		keys = append(keys, key)
	}
	return idx, keys
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (d *decoder) mapping(n *yaml.Node, v reflect.Value, path string) {
	if isNull(n) {
		return // an empty section keeps its defaults
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "expected a mapping, got %s", kindName(n))
		return
	}
	idx, keys := fieldIndex(v.Type())
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.fail(k, path, "keys must be plain strings, got %s", kindName(k))
			continue
		}
		p := joinPath(path, k.Value)
		if first, dup := seen[k.Value]; dup {
			d.fail(k, p, "duplicate key (first at line %d)", first)
			continue
		}
		seen[k.Value] = k.Line
		fi, ok := idx[k.Value]
		if !ok {
			d.fail(k, p, "unknown key; known keys here: %s", strings.Join(keys, ", "))
			continue
		}
		d.lines[p] = k.Line
		d.value(val, v.Field(fi), p)
	}
}

func (d *decoder) sequence(n *yaml.Node, v reflect.Value, path string) {
	if isNull(n) {
		v.Set(reflect.Zero(v.Type()))
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.fail(n, path, "expected a list, got %s", kindName(n))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		p := path + "[" + strconv.Itoa(i) + "]"
		d.lines[p] = item.Line
		d.value(item, s.Index(i), p)
	}
	v.Set(s)
}

// stringMap decodes a map[string]string such as node.labels.
func (d *decoder) stringMap(n *yaml.Node, v reflect.Value, path string) {
	if isNull(n) {
		v.Set(reflect.Zero(v.Type()))
		return
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "expected a mapping, got %s", kindName(n))
		return
	}
	m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || isNull(k) {
			d.fail(k, path, "keys must be plain strings, got %s", kindName(k))
			continue
		}
		p := joinPath(path, k.Value)
		if first, dup := seen[k.Value]; dup {
			d.fail(k, p, "duplicate key (first at line %d)", first)
			continue
		}
		seen[k.Value] = k.Line
		d.lines[p] = k.Line
		elem := reflect.New(v.Type().Elem()).Elem()
		d.value(val, elem, p)
		m.SetMapIndex(reflect.ValueOf(k.Value), elem)
	}
	v.Set(m)
}

// UnmarshalYAML decodes a Go duration written as a string ("500ms",
// "15s", "5m"). Text that does not parse is not an error here: it is kept
// as written and Validate reports it, so that one bad value does not hide
// the other problems of the file. Null is the zero duration.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: expected a duration such as 15s, got %s", n.Line, kindName(n))
	}
	if isNull(n) {
		*d = Duration{}
		return nil
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		*d = Duration{raw: n.Value, bad: true}
		return nil
	}
	*d = Duration{D: v, raw: n.Value}
	return nil
}

// MarshalYAML writes the duration in Go syntax, or a bad duration as it
// was read.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// String returns the duration in Go syntax, or a bad duration as written.
func (d Duration) String() string {
	if d.bad {
		return d.raw
	}
	return d.D.String()
}

// Valid reports whether the duration was decoded without error.
func (d Duration) Valid() bool { return !d.bad }

// Line returns the line path was read from; for a path the file did not
// set, the line of its nearest enclosing key or list item that it did
// set; 0 when none (a default, or a Config not decoded from YAML). Paths
// are dotted YAML keys with list indexes: "mesh.keepalive",
// "inference.roles[0].listen", "node.labels.rack".
func (c *Config) Line(path string) int {
	for path != "" {
		if n, ok := c.lines[path]; ok {
			return n
		}
		cut := max(strings.LastIndexByte(path, '.'), strings.LastIndexByte(path, '['))
		if cut < 0 {
			return 0
		}
		path = path[:cut]
	}
	return 0
}

// keyPaths returns the recorded key paths in sorted order (for tests).
func (c *Config) keyPaths() []string {
	out := make([]string, 0, len(c.lines))
	for p := range c.lines {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}
