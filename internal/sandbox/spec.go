package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// LauncherName is the argv[0] nodeld is started with to launch an
// instance: nodeld's main hands it to LauncherMain before anything else.
const LauncherName = "nodeld-sandbox"

// SpecFD is the file descriptor the launcher reads its Spec from.
const SpecFD = 3

// Bounds on a Spec, checked while decoding.
const (
	// MaxSpecBytes bounds the encoded spec.
	MaxSpecBytes = 256 << 10
	// MaxSpecPaths bounds each path list.
	MaxSpecPaths = 256
	// MaxSpecArgs bounds the command line.
	MaxSpecArgs = 1024
	// MaxPathBytes bounds one path.
	MaxPathBytes = 4096
	// MaxArgBytes bounds one argument.
	MaxArgBytes = 64 << 10
)

// Spec is what the launcher applies before it execs an instance's
// command.
type Spec struct {
	// Path is the program, an absolute path.
	Path string `json:"path"`
	// Args is the command line, Args[0] included.
	Args []string `json:"args"`
	// Landlock asks for the file-system rules below; false (filesystem
	// isolation off) execs with no_new_privs only.
	Landlock bool `json:"landlock"`
	// Read are the files and directories the command may read and
	// execute (absolute).
	Read []string `json:"read,omitempty"`
	// Write are the directories it may read, write and create in.
	Write []string `json:"write,omitempty"`
	// Devices are the device nodes and device directories it may read,
	// write and ioctl.
	Devices []string `json:"devices,omitempty"`
}

// ErrSpec is wrapped by every error of DecodeSpec.
var ErrSpec = errors.New("bad launcher spec")

// DecodeSpec reads one Spec from r: strict JSON, nothing after it, at most
// MaxSpecBytes, every path absolute and clean.
func DecodeSpec(r io.Reader) (Spec, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxSpecBytes+1))
	if err != nil {
		return Spec{}, fmt.Errorf("%w: read: %v", ErrSpec, err)
	}
	if len(data) > MaxSpecBytes {
		return Spec{}, fmt.Errorf("%w: more than %d bytes", ErrSpec, MaxSpecBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s Spec
	if err := dec.Decode(&s); err != nil {
		return Spec{}, fmt.Errorf("%w: %v", ErrSpec, err)
	}
	if dec.More() || dec.InputOffset() != int64(len(bytes.TrimRight(data, " \t\r\n"))) {
		return Spec{}, fmt.Errorf("%w: data after the spec", ErrSpec)
	}
	if err := s.validate(); err != nil {
		return Spec{}, fmt.Errorf("%w: %v", ErrSpec, err)
	}
	return s, nil
}

// validate reports every problem of s at once.
func (s Spec) validate() error {
	var errs []error
	if err := checkPath(s.Path); err != nil {
		errs = append(errs, fmt.Errorf("path: %w", err))
	}
	if len(s.Args) == 0 || len(s.Args) > MaxSpecArgs {
		errs = append(errs, fmt.Errorf("args: 1 to %d, got %d", MaxSpecArgs, len(s.Args)))
	}
	for i, a := range s.Args {
		if len(a) > MaxArgBytes || strings.IndexByte(a, 0) >= 0 {
			errs = append(errs, fmt.Errorf("args[%d]: longer than %d bytes or holds NUL", i, MaxArgBytes))
		}
	}
	for name, list := range map[string][]string{"read": s.Read, "write": s.Write, "devices": s.Devices} {
		if len(list) > MaxSpecPaths {
			errs = append(errs, fmt.Errorf("%s: %d paths, at most %d", name, len(list), MaxSpecPaths))
			continue
		}
		for i, p := range list {
			if err := checkPath(p); err != nil {
				errs = append(errs, fmt.Errorf("%s[%d]: %w", name, i, err))
			}
		}
	}
	return errors.Join(errs...)
}

// checkPath requires an absolute, clean path of bounded length without NUL.
func checkPath(p string) error {
	switch {
	case len(p) == 0 || len(p) > MaxPathBytes:
		return fmt.Errorf("1 to %d bytes", MaxPathBytes)
	case strings.IndexByte(p, 0) >= 0:
		return errors.New("holds NUL")
	case !filepath.IsAbs(p) || filepath.Clean(p) != p:
		return fmt.Errorf("%q is not an absolute clean path", p)
	}
	return nil
}
