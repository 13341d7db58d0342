package main

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/dispatch"
	"github.com/nodeld/nodeld/internal/operator"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/plane"
)

const packageUsage = `usage:
  nodeld package keygen --out FILE                 make a publisher key; prints its public key hex
  nodeld package build --manifest TEMPLATE DIR     write DIR/manifest.json from TEMPLATE, listing DIR's files
  nodeld package sign --key FILE DIR               sign DIR/manifest.json into DIR/manifest.sig
  nodeld package verify --anchor HEX [--anchor HEX...] DIR
                                                   verify signature, files and revocations (exit 0 or 1)
  nodeld package revoke --kind package|signer|artifact VALUE [--reason TEXT] [--mesh] [--config FILE]
  nodeld package unrevoke --kind package|signer|artifact VALUE [--mesh] [--config FILE]
                                                   --mesh: a notice signed by this node, sent to linked
                                                   peers (needs the running daemon)
  nodeld package revocations [--config FILE]       list this node's revocations
  nodeld package add [--config FILE] [--anchor HEX...] DIR
                                                   verify DIR against the trust anchors and copy it
                                                   into <data_dir>/store (declared workloads' packages)`

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func cmdPackage(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError("%s", packageUsage)
	}
	verb, rest := args[0], args[1:]
	if isHelp(verb) {
		fmt.Fprintln(stdout, packageUsage)
		return nil
	}
	switch verb {
	case "keygen":
		fs := newFlagSet("package keygen", stderr)
		out := fs.String("out", "", "path of the new private key (PKCS#8 PEM, mode 0600)")
		if pos, err := parseFlags(fs, rest); err != nil || len(pos) != 0 || *out == "" {
			return orUsage(err, "usage: nodeld package keygen --out FILE")
		}
		pub, err := pkg.GenerateKey(*out)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, hex.EncodeToString(pub))
		return nil
	case "build":
		fs := newFlagSet("package build", stderr)
		tmpl := fs.String("manifest", "", "manifest template (files are filled in from DIR)")
		pos, err := parseFlags(fs, rest)
		if err != nil || len(pos) != 1 || *tmpl == "" {
			return orUsage(err, "usage: nodeld package build --manifest TEMPLATE DIR")
		}
		data, err := os.ReadFile(*tmpl)
		if err != nil {
			return err
		}
		var m pkg.Manifest
		dec := json.NewDecoder(strings.NewReader(string(data)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&m); err != nil {
			return fmt.Errorf("manifest template %s: %w", *tmpl, err)
		}
		// A second object or a stray bracket after the manifest is a
		// damaged template, not something to build from in silence.
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			return fmt.Errorf("manifest template %s: trailing data after the manifest", *tmpl)
		}
		if _, err := pkg.Build(pos[0], m); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s\n", filepath.Join(pos[0], pkg.ManifestFile))
		return nil
	case "sign":
		fs := newFlagSet("package sign", stderr)
		keyPath := fs.String("key", "", "publisher private key")
		pos, err := parseFlags(fs, rest)
		if err != nil || len(pos) != 1 || *keyPath == "" {
			return orUsage(err, "usage: nodeld package sign --key FILE DIR")
		}
		key, err := pkg.LoadSigningKey(*keyPath)
		if err != nil {
			return err
		}
		if err := pkg.Sign(pos[0], key); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "signed %s by %s\n", pos[0], hex.EncodeToString(key.Public().(ed25519.PublicKey)))
		return nil
	case "verify":
		fs := newFlagSet("package verify", stderr)
		var anchors stringList
		fs.Var(&anchors, "anchor", "trusted publisher public key hex (repeatable)")
		revPath := fs.String("revocations", "", "revocations.json to check against (optional)")
		pos, err := parseFlags(fs, rest)
		if err != nil || len(pos) != 1 || len(anchors) == 0 {
			return orUsage(err, "usage: nodeld package verify --anchor HEX [--anchor HEX...] DIR")
		}
		a, err := pkg.ParseAnchors(anchors)
		if err != nil {
			return usageError("--anchor: %v", err)
		}
		var rev *pkg.Revocations
		if *revPath != "" {
			if rev, err = pkg.OpenRevocations(*revPath, time.Now); err != nil {
				return err
			}
		}
		v, err := pkg.VerifyDir(pos[0], a, rev)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", pos[0], err)
			return errSilent(1)
		}
		fmt.Fprintf(stdout, "%s: ok: %s %s (%s), %d files, signed by %s\n", pos[0], v.Manifest.ID, v.Manifest.Version,
			v.Manifest.Kind, len(v.Manifest.Files), hex.EncodeToString(v.Signer))
		return nil
	case "revoke", "unrevoke", "revocations":
		return cmdRevocations(verb, rest, stdout, stderr)
	case "add":
		return cmdPackageAdd(rest, stdout, stderr)
	default:
		return usageError("unknown package command %q\n%s", verb, packageUsage)
	}
}

func cmdRevocations(verb string, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("package "+verb, stderr)
	cfgPath := fs.String("config", "", "config file, to find the data dir")
	// Only the flags a verb takes are defined, so its --help lists
	// those and no others: revocations only lists.
	kind, reason, viaMesh := new(string), new(string), new(bool)
	if verb != "revocations" {
		fs.StringVar(kind, "kind", "", "package | signer | artifact")
		fs.StringVar(reason, "reason", "", "why (recorded with the revocation)")
		fs.BoolVar(viaMesh, "mesh", false, "sign a notice with this node's key and send it to linked peers (needs the running daemon)")
	}
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if verb == "revocations" && len(pos) != 0 {
		return usageError("usage: nodeld package revocations [--config FILE]")
	}
	cfg, _, err := loadConfig(*cfgPath, true)
	if err != nil {
		return err
	}
	if verb != "revocations" {
		if len(pos) != 1 || *kind == "" {
			return usageError("usage: nodeld package %s --kind package|signer|artifact VALUE [--reason TEXT] [--mesh] [--config FILE]", verb)
		}
		// A running daemon holds the list and tears down what a
		// revocation hits: ask it first.
		ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
		defer cancel()
		resp, err := operator.Dial(ctx, cfg.SocketPath(), operator.Request{
			Verb: verb, Node: config.SelfRef,
			Args: operator.Args{Subject: &pkg.Subject{Kind: *kind, Value: pos[0], Reason: *reason}, Notify: *viaMesh},
		})
		switch {
		case err == nil && resp.OK:
			var res dispatch.RevokeResult
			_ = json.Unmarshal(resp.Result, &res)
			if *viaMesh {
				fmt.Fprintf(stdout, "%sd %s %s by notice %d (applied by the running daemon, sent to linked peers)\n", verb, *kind, pos[0], res.NoticeSeq)
				return nil
			}
			fmt.Fprintf(stdout, "%sd %s %s%s (applied by the running daemon)\n", verb, *kind, pos[0], unchanged(res.Changed))
			return nil
		case err == nil:
			return fmt.Errorf("%s: %s: %s", verb, resp.Code, resp.Reason)
		case !errors.Is(err, operator.ErrDaemonNotRunning):
			return err
		case *viaMesh:
			return fmt.Errorf("%s --mesh: %w (the notice is sent by the running daemon)", verb, err)
		}
		// No daemon: edit the file; the daemon reads it when it starts.
	}
	if err := os.MkdirAll(cfg.Node.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	rev, err := pkg.OpenRevocations(filepath.Join(cfg.Node.DataDir, pkg.RevocationsFile), time.Now)
	if err != nil {
		return err
	}
	switch verb {
	case "revocations":
		for _, s := range rev.List() {
			fmt.Fprintf(stdout, "%-8s %s  %s  %s\n", s.Kind, s.Value, s.At.UTC().Format(time.RFC3339), s.Reason)
		}
		return nil
	case "revoke":
		changed, err := rev.Revoke(pkg.Subject{Kind: *kind, Value: pos[0], Reason: *reason, At: time.Now(), By: "operator"})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "revoked %s %s%s\n", *kind, pos[0], unchanged(changed))
		return nil
	default:
		changed, err := rev.Unrevoke(*kind, pos[0])
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "unrevoked %s %s%s\n", *kind, pos[0], unchanged(changed))
		return nil
	}
}

func unchanged(changed bool) string {
	if changed {
		return ""
	}
	return " (no change)"
}

// orUsage returns err when set, else a usage error with msg.
func orUsage(err error, msg string) error {
	var ee *exitError
	if errors.As(err, &ee) || err != nil && !errors.Is(err, flag.ErrHelp) {
		return err
	}
	return usageError("%s", msg)
}

// cmdPackageAdd verifies a signed package and copies it into the
// controller's package store, <data_dir>/store/<id>/<version>/, where
// declared workloads (controller.workloads) find it. The trust anchors
// are --anchor, else the controller's (controller.trust_anchors, else
// host.trust_anchors); the node's revocation list is checked too.
func cmdPackageAdd(args []string, stdout, stderr io.Writer) error {
	const use = "usage: nodeld package add [--config FILE] [--anchor HEX...] DIR"
	fs := newFlagSet("package add", stderr)
	cfgPath := fs.String("config", "", "config file, to find the data dir and the trust anchors")
	var anchorFlags stringList
	fs.Var(&anchorFlags, "anchor", "trusted publisher public key hex (repeatable; default: controller.trust_anchors, else host.trust_anchors)")
	pos, err := parseFlags(fs, args)
	if err != nil || len(pos) != 1 {
		return orUsage(err, use)
	}
	cfg, _, err := loadConfig(*cfgPath, true)
	if err != nil {
		return err
	}
	keys, from := []string(anchorFlags), "--anchor"
	if len(keys) == 0 {
		// The controller places from the store: its anchors.
		keys, from = plane.AnchorKeys(cfg)
	}
	if len(keys) == 0 {
		return usageError("package add: no trust anchors: set controller.trust_anchors (or host.trust_anchors) in the config or pass --anchor")
	}
	anchors, err := pkg.ParseAnchors(keys)
	if err != nil {
		return usageError("%s: %v", from, err)
	}
	dir, err := filepath.Abs(pos[0])
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.Node.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	rev, err := pkg.OpenRevocations(filepath.Join(cfg.Node.DataDir, pkg.RevocationsFile), time.Now)
	if err != nil {
		return err
	}
	store := pkg.NewStore(filepath.Join(cfg.Node.DataDir, pkg.StoreDir), rev)
	v, added, err := store.Add(dir, anchors)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", pos[0], err)
		return errSilent(1)
	}
	m := v.Manifest
	note := "stored"
	if !added {
		note = "already stored"
	}
	fmt.Fprintf(stdout, "%s %s %s (%s), %d files, signed by %s, in %s\n", note, m.ID, m.Version, m.Kind, len(m.Files),
		hex.EncodeToString(v.Signer), v.Dir)
	return nil
}
