package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// SocketPathOf reads the operator socket path from a config file's text
// without decoding it: admin.socket, else <node.data_dir>/nodeld.sock,
// else the default data dir's socket, as SocketPath would give for the
// file. It is for nodeld ctl when the file does not load (a refused
// reload left a malformed file in place while the daemon runs on the old
// one): it reads only plain block-style keys at the top of their
// sections, line by line, and says so when it cannot (a section or
// value in flow style, an anchor or a tag): the caller then asks for
// --socket. The path is as written; a relative one is relative to the
// working directory, as the daemon takes it.
func SocketPathOf(data []byte) (string, error) {
	if len(data) > MaxConfigBytes {
		return "", fmt.Errorf("config is larger than the limit of %d bytes", MaxConfigBytes)
	}
	var socket, dataDir string
	section, childIndent := "", -1
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimRight(line, "\r")
		trimmed := strings.TrimLeft(line, " ")
		if trimmed == "" || trimmed[0] == '#' || trimmed == "---" {
			continue
		}
		if strings.HasPrefix(trimmed, "\t") {
			continue // not YAML indentation; not ours to guess
		}
		indent := len(line) - len(trimmed)
		key, val, hasColon := strings.Cut(trimmed, ":")
		if indent == 0 {
			section, childIndent = "", -1
			if !hasColon || (key != "admin" && key != "node") {
				continue
			}
			if v := strings.TrimSpace(stripComment(val)); v != "" {
				return "", fmt.Errorf("line %d: %s is not a block of keys; pass --socket", n+1, key)
			}
			section = key
			continue
		}
		if section == "" {
			continue
		}
		if childIndent < 0 {
			childIndent = indent
		}
		if indent != childIndent || !hasColon {
			continue
		}
		var dst *string
		switch {
		case section == "admin" && key == "socket":
			dst = &socket
		case section == "node" && key == "data_dir":
			dst = &dataDir
		default:
			continue
		}
		v, err := plainScalar(val)
		if err != nil {
			return "", fmt.Errorf("line %d: %s.%s: %w; pass --socket", n+1, section, key, err)
		}
		*dst = v
	}
	switch {
	case socket != "":
		return socket, nil
	case dataDir != "":
		return filepath.Join(dataDir, SocketName), nil
	}
	return filepath.Join(DefaultDataDir, SocketName), nil
}

// stripComment drops a comment from an unquoted value.
func stripComment(v string) string {
	if i := strings.Index(v, " #"); i >= 0 {
		return v[:i]
	}
	if strings.HasPrefix(strings.TrimSpace(v), "#") {
		return ""
	}
	return v
}

// plainScalar reads a one-line scalar: plain, 'single' or "double" quoted
// (without escapes); anything else is an error.
func plainScalar(raw string) (string, error) {
	v := strings.TrimSpace(raw)
	switch {
	case v == "":
		return "", nil
	case v[0] == '"' || v[0] == '\'':
		q := v[0]
		end := strings.IndexByte(v[1:], q)
		if end < 0 {
			return "", errors.New("unterminated quoted value")
		}
		s := v[1 : 1+end]
		rest := strings.TrimSpace(v[2+end:])
		if rest != "" && rest[0] != '#' || q == '"' && strings.Contains(s, `\`) {
			return "", errors.New("a quoted value this reader does not take")
		}
		return s, nil
	case strings.ContainsRune("[{&*!|>%@`", rune(v[0])):
		return "", errors.New("a value this reader does not take")
	}
	return strings.TrimSpace(stripComment(v)), nil
}
