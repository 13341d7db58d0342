package pkg

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/nodeld/nodeld/internal/grammar"
)

// File names inside a package directory.
const (
	ManifestFile  = "manifest.json"
	SignatureFile = "manifest.sig"
)

// SchemaVersion is the only manifest schema this package reads.
const SchemaVersion = 1

// Package kinds.
const (
	KindInference = "inference"
	KindService   = "service"
)

// Manifest is the decoded manifest.json of a package. It is only ever
// decoded from the exact bytes that were signed; it is never re-marshalled
// to be verified.
type Manifest struct {
	// Schema is SchemaVersion.
	Schema int `json:"schema"`
	// ID names the package: a grammar.ValidName.
	ID string `json:"id"`
	// Version is a semver-like token: a grammar.ValidVersion.
	Version string `json:"version"`
	// Kind is KindInference or KindService.
	Kind string `json:"kind"`
	// Runtime says how the package is run.
	Runtime Runtime `json:"runtime"`
	// Role is the inference role an instance serves; required for
	// KindInference, empty for KindService.
	Role string `json:"role,omitempty"`
	// Variants are the alternative ways to place the package (at least
	// one), each with its requirements and resources.
	Variants []Variant `json:"variants"`
	// Files lists every file of the package with its size and SHA-256.
	Files []File `json:"files"`

	// Labels name what the package is, for co-residency: another
	// package's Excludes may name one of them. Names, at most
	// MaxPackageLabels.
	Labels []string `json:"labels,omitempty"`
	// Excludes name labels of packages this one must not share a node
	// with (either side's exclusion keeps them apart). Names, at most
	// MaxPackageLabels.
	Excludes []string `json:"excludes,omitempty"`
	// PerfTarget, when set, ranks nodes by a measured performance metric
	// and may reject those that miss its budget.
	PerfTarget *PerfTarget `json:"perf_target,omitempty"`
	// Sticky asks the controller to keep an instance on its current node
	// unless that node no longer fits.
	Sticky bool `json:"sticky,omitempty"`
}

// Runtime says how a package is run.
type Runtime struct {
	// Type is a runtime a package may be run with
	// (grammar.RunnableRuntimes): process, llama.cpp, ollama or mlx-lm.
	Type string `json:"type"`
	// Command is the program: a listed file (relative path) or an absolute
	// path on the host. Required for process; optional for llama.cpp and
	// mlx-lm (the host then uses its own llama-server or mlx_lm.server);
	// not allowed for ollama.
	Command string `json:"command,omitempty"`
	// Args are passed to Command. Expanding any placeholders in them is
	// the host's business.
	Args []string `json:"args,omitempty"`
	// Env is added to the process environment.
	Env map[string]string `json:"env,omitempty"`
	// ModelFile is a listed file holding the model: required for
	// llama.cpp (a GGUF file), optional for mlx-lm.
	ModelFile string `json:"model_file,omitempty"`
	// Model names a model the runtime fetches or already holds (an Ollama
	// model name, an mlx-lm Hugging Face repository); required for ollama,
	// and for mlx-lm when ModelFile is empty.
	Model string `json:"model,omitempty"`
	// Health, when set, says how to probe a started instance.
	Health *Health `json:"health,omitempty"`
}

// Health says how to probe an instance.
type Health struct {
	// Path is the HTTP path probed with GET, starting with "/".
	Path string `json:"path"`
}

// Variant is one way of placing a package: a route. Its requirements are
// EffectiveRequirements (the requires block read in the requirement
// grammar, then Requirements); its memory demand is Resources.
type Variant struct {
	// Name is a token unique within the manifest.
	Name string `json:"name"`
	// Requires are hard constraints on the node in the first manifest
	// grammar, kept so packages signed before requirements existed stay
	// valid; EffectiveRequirements reads them as requirements.
	Requires Requires `json:"requires"`
	// Requirements select capabilities of the node (at most
	// MaxRequirements), in addition to Requires.
	Requirements []Requirement `json:"requirements,omitempty"`
	// Execution is grammar.ExecutionNative (the default when empty) or
	// grammar.ExecutionEmulated: an emulated route is placed only when
	// emulation is explicitly allowed, and never over a native one.
	Execution string `json:"execution,omitempty"`
	// Resources are what an instance reserves on the node.
	Resources Resources `json:"resources"`
}

// Requires are a variant's hard constraints in the first manifest
// grammar. An empty list means any.
type Requires struct {
	// Arch lists acceptable CPU architectures (GOARCH names).
	Arch []string `json:"arch,omitempty"`
	// OS lists acceptable operating systems (GOOS names).
	OS []string `json:"os,omitempty"`
	// GPU requires a GPU when true.
	GPU bool `json:"gpu,omitempty"`
	// Runtimes lists runtimes that must be found on the node.
	Runtimes []string `json:"runtimes,omitempty"`
}

// Resources are what an instance of a variant reserves: its memory
// demand, per route (each variant says its own). The placement engine
// fits MemBytes and VRAMBytes together into a node's mem.unified pool, or
// MemBytes into mem.system and VRAMBytes into the sum of its mem.vram.
type Resources struct {
	// MemBytes is the host memory demand in bytes.
	MemBytes uint64 `json:"mem_bytes,omitempty"`
	// VRAMBytes is the accelerator memory demand in bytes.
	VRAMBytes uint64 `json:"vram_bytes,omitempty"`
	// CPUMillis is the CPU share, in thousandths of a core.
	CPUMillis uint64 `json:"cpu_millis,omitempty"`
}

// File is one file of a package.
type File struct {
	// Path is relative to the package directory, slash-separated and
	// clean.
	Path string `json:"path"`
	// Size is the exact size in bytes.
	Size int64 `json:"size"`
	// SHA256 is the lower-case hex SHA-256 of the content.
	SHA256 string `json:"sha256"`
	// Exec marks an executable file (installed 0755 rather than 0644).
	Exec bool `json:"exec,omitempty"`
}

// ParseManifest decodes and validates manifest bytes. It does not check
// signatures; see VerifyManifest. Errors are *VerifyError with code
// CodeTooLarge or CodeBadManifest.
func ParseManifest(data []byte) (*Manifest, error) {
	if len(data) > MaxManifestBytes {
		return nil, verr(CodeTooLarge, "manifest has %d bytes, limit %d", len(data), MaxManifestBytes)
	}
	var m Manifest
	if err := decodeStrict(data, &m); err != nil {
		return nil, &VerifyError{Code: CodeBadManifest, Detail: "decode manifest: " + err.Error(), Err: err}
	}
	if err := m.Validate(); err != nil {
		code := CodeBadManifest
		if errors.Is(err, errPathEscape) {
			code = CodePathEscape
		}
		return nil, &VerifyError{Code: code, Detail: err.Error(), Err: err}
	}
	return &m, nil
}

// ManifestHash returns the lower-case hex SHA-256 of manifest bytes: the
// package's artifact hash, which names it in place requests and in
// revocations.
func ManifestHash(manifestBytes []byte) string {
	sum := sha256.Sum256(manifestBytes)
	return hex.EncodeToString(sum[:])
}

// File returns the listed file with path p.
func (m *Manifest) File(p string) (File, bool) {
	for _, f := range m.Files {
		if f.Path == p {
			return f, true
		}
	}
	return File{}, false
}

// Variant returns the variant named name.
func (m *Manifest) Variant(name string) (Variant, bool) {
	for _, v := range m.Variants {
		if v.Name == name {
			return v, true
		}
	}
	return Variant{}, false
}

// TotalSize returns the sum of the listed files' sizes.
func (m *Manifest) TotalSize() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

// Validate checks the manifest statically and reports every problem at
// once.
func (m *Manifest) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if m.Schema != SchemaVersion {
		add("schema: %d is not supported, want %d", m.Schema, SchemaVersion)
	}
	if !grammar.ValidName(m.ID) {
		add("id: %q is not %s", clip(m.ID), grammar.NameSyntax)
	}
	if !grammar.ValidVersion(m.Version) {
		add("version: %q is not %s", clip(m.Version), grammar.VersionSyntax)
	}
	switch m.Kind {
	case KindInference:
		if !grammar.ValidName(m.Role) {
			add("role: %q is not a role name (%s); an inference package needs one", clip(m.Role), grammar.NameSyntax)
		}
	case KindService:
		if m.Role != "" {
			add("role: a service package serves no role")
		}
	default:
		add("kind: %q is not %q or %q", clip(m.Kind), KindInference, KindService)
	}

	// Files first, so the runtime can refer to them.
	files := map[string]File{}
	if len(m.Files) > MaxFiles {
		add("files: %d files, limit %d", len(m.Files), MaxFiles)
	} else {
		var total int64
		dirs := map[string]string{}
		for i, f := range m.Files {
			base := "files[" + strconv.Itoa(i) + "]"
			if err := validFilePath(f.Path); err != nil {
				add("%s.path: %w", base, err)
				continue
			}
			if _, dup := files[f.Path]; dup {
				add("%s.path: duplicate %q", base, f.Path)
				continue
			}
			files[f.Path] = f
			for d := path.Dir(f.Path); d != "."; d = path.Dir(d) {
				dirs[d] = f.Path
			}
			if f.Size < 0 || f.Size > MaxFileSize {
				add("%s.size: %d is not 0 to %d", base, f.Size, int64(MaxFileSize))
			} else {
				total += f.Size
			}
			if !validSHA256(f.SHA256) {
				add("%s.sha256: not 64 lower-case hex characters", base)
			}
		}
		for _, p := range slices.Sorted(maps.Keys(files)) {
			if under, ok := dirs[p]; ok {
				add("files: %q is listed as a file and is a directory of %q", p, under)
			}
		}
		if total > MaxTotalSize {
			add("files: total size %d, limit %d", total, int64(MaxTotalSize))
		}
	}

	m.Runtime.validate(files, add)

	if len(m.Variants) == 0 {
		add("variants: at least one variant is needed")
	}
	if len(m.Variants) > MaxVariants {
		add("variants: %d variants, limit %d", len(m.Variants), MaxVariants)
	} else {
		names := map[string]bool{}
		for i, v := range m.Variants {
			base := "variants[" + strconv.Itoa(i) + "]"
			if !grammar.ValidName(v.Name) {
				add("%s.name: %q is not %s", base, clip(v.Name), grammar.NameSyntax)
			} else if names[v.Name] {
				add("%s.name: duplicate %q", base, v.Name)
			}
			names[v.Name] = true
			checkList(base+".requires.arch", v.Requires.Arch, add)
			checkList(base+".requires.os", v.Requires.OS, add)
			checkList(base+".requires.runtimes", v.Requires.Runtimes, add)
			v.validateRequirements(base, add)
		}
	}
	checkNames("labels", m.Labels, add)
	checkNames("excludes", m.Excludes, add)
	if m.PerfTarget != nil {
		m.PerfTarget.validate(add)
	}
	return errors.Join(errs...)
}

func (r *Runtime) validate(files map[string]File, add func(string, ...any)) {
	listed := func(field, p string, exec bool) {
		if err := validFilePath(p); err != nil {
			add("runtime.%s: %w", field, err)
			return
		}
		f, ok := files[p]
		if !ok {
			add("runtime.%s: %q is not a listed file", field, p)
			return
		}
		if exec && !f.Exec {
			add("runtime.%s: %q is not marked exec", field, p)
		}
	}
	command := func(required bool) {
		switch {
		case r.Command == "":
			if required {
				add("runtime.command: required for runtime %q", r.Type)
			}
		case len(r.Command) > MaxCommandLen || !grammar.PrintableASCII(r.Command):
			add("runtime.command: longer than %d or not printable", MaxCommandLen)
		case strings.HasPrefix(r.Command, "/"):
			if path.Clean(r.Command) != r.Command {
				add("runtime.command: %q is not a clean absolute path", r.Command)
			}
		default:
			listed("command", r.Command, true)
		}
	}
	switch r.Type {
	case grammar.RuntimeProcess:
		command(true)
		if r.ModelFile != "" {
			listed("model_file", r.ModelFile, false)
		}
	case grammar.RuntimeLlamaCpp:
		command(false)
		if r.ModelFile == "" {
			add("runtime.model_file: required for runtime %q", r.Type)
		} else {
			listed("model_file", r.ModelFile, false)
		}
	case grammar.RuntimeOllama:
		if r.Command != "" {
			add("runtime.command: not allowed for runtime %q (the node's ollama serves it)", r.Type)
		}
		if r.ModelFile != "" {
			add("runtime.model_file: not allowed for runtime %q", r.Type)
		}
		if r.Model == "" {
			add("runtime.model: required for runtime %q", r.Type)
		}
	case grammar.RuntimeMLXLM:
		command(false)
		if r.ModelFile != "" {
			listed("model_file", r.ModelFile, false)
		} else if r.Model == "" {
			add("runtime.model: runtime %q needs model or model_file", r.Type)
		}
	default:
		add("runtime.type: %q is not one of %s", clip(r.Type), strings.Join(grammar.RunnableRuntimes(), ", "))
	}
	if len(r.Model) > MaxCommandLen || !grammar.PrintableASCII(r.Model) {
		add("runtime.model: longer than %d or not printable", MaxCommandLen)
	}
	if len(r.Args) > MaxArgs {
		add("runtime.args: %d arguments, limit %d", len(r.Args), MaxArgs)
	} else {
		for i, a := range r.Args {
			if len(a) > MaxArgLen || !utf8.ValidString(a) || strings.ContainsRune(a, 0) {
				add("runtime.args[%d]: longer than %d, not UTF-8 or holds NUL", i, MaxArgLen)
			}
		}
	}
	if len(r.Env) > MaxEnv {
		add("runtime.env: %d variables, limit %d", len(r.Env), MaxEnv)
	} else {
		for _, k := range slices.Sorted(maps.Keys(r.Env)) {
			v := r.Env[k]
			if !grammar.ValidEnvName(k) {
				add("runtime.env: %q is not a variable name ([A-Za-z_][A-Za-z0-9_]*, at most %d)", clip(k), grammar.MaxEnvNameLen)
			}
			if len(v) > MaxEnvValueLen || !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
				add("runtime.env[%q]: value longer than %d, not UTF-8 or holds NUL", clip(k), MaxEnvValueLen)
			}
		}
	}
	if r.Health != nil {
		p := r.Health.Path
		if !grammar.ValidHealthPath(p) {
			add("runtime.health.path: %q is not an absolute URL path of at most %d printable characters without space, ? or #", clip(p), grammar.MaxHealthPathLen)
		}
	}
}

// checkList checks a requires list: at most MaxListLen Names without
// repeats.
func checkList(field string, list []string, add func(string, ...any)) {
	checkNameList(field, list, MaxListLen, add)
}

// checkNameList checks that list holds at most limit Names, none twice.
func checkNameList(field string, list []string, limit int, add func(string, ...any)) {
	if len(list) > limit {
		add("%s: %d entries, limit %d", field, len(list), limit)
		return
	}
	seen := map[string]bool{}
	for _, s := range list {
		if !grammar.ValidName(s) {
			add("%s: %q is not %s", field, clip(s), grammar.NameSyntax)
		} else if seen[s] {
			add("%s: duplicate %q", field, s)
		}
		seen[s] = true
	}
}

// errPathEscape marks a listed path that would leave the package
// directory; ParseManifest reports it as CodePathEscape.
var errPathEscape = errors.New("path leaves the package directory")

// validFilePath reports why p is not an acceptable listed file path: it
// must be relative, slash-separated, clean, free of "..", backslashes,
// control characters and colons, and must not name the manifest or its
// signature.
func validFilePath(p string) error {
	switch {
	case p == "":
		return errors.New("empty path")
	case len(p) > MaxPathLen:
		return fmt.Errorf("path longer than %d", MaxPathLen)
	case !utf8.ValidString(p):
		return errors.New("path is not UTF-8")
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("%q is absolute: %w", p, errPathEscape)
	case strings.ContainsAny(p, "\\:"):
		return fmt.Errorf("%q holds a backslash or colon", p)
	case slices.Contains(strings.Split(p, "/"), ".."):
		return fmt.Errorf("%q: %w", p, errPathEscape)
	case path.Clean(p) != p || p == ".":
		return fmt.Errorf("%q is not a clean path", p)
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%q holds a control character", p)
		}
	}
	parts := strings.Split(p, "/")
	if len(parts) > MaxPathDepth {
		return fmt.Errorf("%q is deeper than %d", p, MaxPathDepth)
	}
	if p == ManifestFile || p == SignatureFile {
		return fmt.Errorf("%q is reserved", p)
	}
	return nil
}

// validSHA256 reports whether s is 64 lower-case hex characters.
func validSHA256(s string) bool { return validHex(s, sha256.Size) }

func validHex(s string, n int) bool {
	if len(s) != 2*n {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !(b >= '0' && b <= '9' || b >= 'a' && b <= 'f') {
			return false
		}
	}
	return true
}

// clip shortens untrusted strings quoted in error messages.
func clip(s string) string {
	const n = 80
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
