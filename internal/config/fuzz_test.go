package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse checks that decoding never panics, reports only
// *DecodeError values, and that a decoded config validates and diffs
// without panicking.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	more, _ := filepath.Glob(filepath.Join("..", "..", "configs", "*", "*.yaml"))
	top, _ := filepath.Glob(filepath.Join("..", "..", "configs", "*.yaml"))
	for _, file := range append(append(files, more...), top...) {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add(Embedded())
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("log: !!binary aGVsbG8=\nnode: {name: !!binary aGk=}\n"))
	f.Add([]byte("inference: {roles: [{name: chat, listen: \"127.0.0.1:1\"}], instances: [{}]}\n"))
	f.Add([]byte("<<: {log: {}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			for _, e := range flatten(err) {
				var de *DecodeError
				if !errors.As(e, &de) {
					t.Fatalf("Parse error %q is %T", e, e)
				}
			}
		} else {
			_ = c.Validate()
			if d := Changed(c, c); !d.Empty() {
				t.Fatalf("Changed(c, c) = %+v", d)
			}
			for _, p := range c.keyPaths() {
				if c.Line(p) < 1 {
					t.Fatalf("Line(%q) = %d", p, c.Line(p))
				}
			}
		}
		_, _ = Check(data)
	})
}
