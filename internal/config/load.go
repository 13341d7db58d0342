package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// FileError reports every problem of one config file. Errs holds
// *DecodeError and *ValidationError values; errors.As reaches them.
type FileError struct {
	File string
	Errs []error
}

// Error formats one problem as "config FILE: line N: path: msg" and
// several as "config FILE: K problems:" followed by one indented line
// per problem.
func (e *FileError) Error() string {
	if len(e.Errs) == 1 {
		return "config " + e.File + ": " + e.Errs[0].Error()
	}
	var b strings.Builder
	b.WriteString("config " + e.File + ": " + strconv.Itoa(len(e.Errs)) + " problems:")
	for _, err := range e.Errs {
		b.WriteString("\n  ")
		b.WriteString(err.Error())
	}
	return b.String()
}

// Unwrap returns the problems.
func (e *FileError) Unwrap() []error { return e.Errs }

// Check decodes data strictly and validates the result, reporting the
// decoding and validation problems together (errors.Join, in line
// order). It is Parse followed by Validate, except that a file with
// decoding problems is still validated as far as it was decoded; a
// validation problem at or under a path that failed to decode is left
// out, since it only echoes the decoding problem.
func Check(data []byte) (*Config, error) {
	c, errs := decode(data)
	errs = append(errs, withoutDecoded(c.validate(), errs)...)
	sortByLine(errs)
	errs = capProblems(errs, func(msg string) error { return &ValidationError{Msg: msg} })
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// Load reads the config file at path (at most MaxConfigBytes), decodes
// it strictly and validates it. Problems with the contents are returned
// as a *FileError naming the file.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read config %s: %w", path, err)
	}
	c, err := Check(data)
	if err != nil {
		return nil, &FileError{File: path, Errs: flatten(err)}
	}
	return c, nil
}

// flatten undoes one errors.Join.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// withoutDecoded drops the validation problems at or under a path that
// already has a decoding problem.
func withoutDecoded(verrs, derrs []error) []error {
	var bad []string
	for _, err := range derrs {
		if de, ok := err.(*DecodeError); ok && de.Path != "" {
			bad = append(bad, de.Path)
		}
	}
	if len(bad) == 0 {
		return verrs
	}
	out := verrs[:0]
	for _, err := range verrs {
		if ve, ok := err.(*ValidationError); ok && underAny(ve.Path, bad) {
			continue
		}
		out = append(out, err)
	}
	return out
}

func underAny(path string, prefixes []string) bool {
	for _, p := range prefixes {
		if path == p || strings.HasPrefix(path, p+".") || strings.HasPrefix(path, p+"[") {
			return true
		}
	}
	return false
}

// sortByLine orders problems by line, those without a line first, and
// keeps check order within a line.
func sortByLine(errs []error) {
	slices.SortStableFunc(errs, func(a, b error) int { return problemLine(a) - problemLine(b) })
}

func problemLine(err error) int {
	switch e := err.(type) {
	case *DecodeError:
		return e.Line
	case *ValidationError:
		return e.Line
	}
	return 0
}

// capProblems keeps the first MaxProblems problems and replaces the rest
// with one problem, made by mk, that counts them.
func capProblems(errs []error, mk func(msg string) error) []error {
	if len(errs) <= MaxProblems {
		return errs
	}
	n := len(errs) - MaxProblems
	msg := fmt.Sprintf("%d more problems not shown", n)
	if n == 1 {
		msg = "1 more problem not shown"
	}
	return append(errs[:MaxProblems:MaxProblems], mk(msg))
}
