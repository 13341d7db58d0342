package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/plane"
)

// defaultConfigPath is where run, keygen, id and the other commands look
// for the config when --config is not given.
const defaultConfigPath = "/etc/nodeld/nodeld.yaml"

const usage = `nodeld: one daemon per host that serves local language models to every
application on the host through fixed loopback URLs, one per model role.

Usage:
  nodeld run [--config FILE] [--chain-reset]   run the daemon
  nodeld keygen [--config FILE]                create <data_dir>/node.key if absent
  nodeld id [--config FILE]                    print the node id and public key
  nodeld config check [FILE]                   validate a config file
  nodeld chain verify [FILE] [--key HEX] [--config FILE]
                                               verify an audit chain
  nodeld status [--config FILE] [--addr HOST:PORT] [--json]
                                               print a running daemon's status
  nodeld package keygen|build|sign|verify|add|revoke|unrevoke|revocations ...
                                               publish and check signed workload packages
  nodeld ctl [--config FILE] [--socket PATH] [--json] VERB ARGS...
                                               drive workloads through the local daemon
                                               (describe|place|start|stop|unload|status|logs,
                                               and on a controller explain|placements|nodes)
  nodeld version                               print the version

Without --config, commands read /etc/nodeld/nodeld.yaml, or the embedded
single-node default when that file does not exist (config check needs a file).
COMMAND --help prints a command's flags.
`

// run is the whole program: it dispatches a subcommand and returns its
// error. It never exits.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errSilent(2)
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run":
		return cmdRun(ctx, rest, stdout, stderr)
	case "keygen":
		return cmdKeygen(rest, stdout, stderr)
	case "id":
		return cmdID(rest, stdout, stderr)
	case "config":
		if len(rest) == 1 && isHelp(rest[0]) {
			fmt.Fprintln(stdout, "usage: nodeld config check [FILE]")
			return nil
		}
		if len(rest) == 0 || rest[0] != "check" {
			return usageError("usage: nodeld config check [FILE]")
		}
		return cmdConfigCheck(rest[1:], stdout, stderr)
	case "chain":
		if len(rest) == 1 && isHelp(rest[0]) {
			fmt.Fprintln(stdout, "usage: nodeld chain verify [FILE] [--key HEX] [--config FILE]")
			return nil
		}
		if len(rest) == 0 || rest[0] != "verify" {
			return usageError("usage: nodeld chain verify [FILE] [--key HEX] [--config FILE]")
		}
		return cmdChainVerify(rest[1:], stdout, stderr)
	case "status":
		return cmdStatus(ctx, rest, stdout, stderr)
	case "ctl":
		return cmdCtl(ctx, rest, stdout, stderr)
	case "package":
		return cmdPackage(rest, stdout, stderr)
	case "version", "--version", "-v":
		fmt.Fprintf(stdout, "nodeld %s (%s)\n", buildVersion(), buildGoVersion())
		return nil
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return usageError("unknown command %q", cmd)
	}
}

// isHelp reports whether arg asks for help where a verb is expected.
func isHelp(arg string) bool {
	return arg == "help" || arg == "-h" || arg == "--help" || arg == "-help"
}

// parseFlags parses flags that may come before, between or after the
// positional arguments, and returns the positionals.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				// -h or --help: the flag set printed its usage, which is
				// what was asked for, so the exit status is 0.
				return nil, errSilent(0)
			}
			return nil, usageError("%s: %v", fs.Name(), err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// loadConfig reads the config at path. When path is empty it reads the
// default path, or, if allowEmbedded and that file is absent, the
// embedded default. It returns the path it used ("" for embedded).
func loadConfig(path string, allowEmbedded bool) (*config.Config, string, error) {
	if path == "" {
		path = defaultConfigPath
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) && allowEmbedded {
			cfg, err := config.LoadEmbedded()
			if err != nil {
				return nil, "", fmt.Errorf("embedded config: %w", err)
			}
			return cfg, "", absolutePaths(cfg)
		}
	}
	cfg, err := config.Load(path)
	if err != nil {
		return nil, path, &exitError{code: 2, err: err}
	}
	if err := absolutePaths(cfg); err != nil {
		return nil, path, err
	}
	return cfg, path, nil
}

// absolutePaths makes the data dir and socket absolute, so nothing the
// daemon hands to a component (a package dir, a process's working dir)
// depends on the directory it was started from.
func absolutePaths(cfg *config.Config) error {
	abs, err := filepath.Abs(cfg.Node.DataDir)
	if err != nil {
		return fmt.Errorf("node.data_dir: %w", err)
	}
	cfg.Node.DataDir = abs
	if cfg.Admin.Socket != "" {
		if cfg.Admin.Socket, err = filepath.Abs(cfg.Admin.Socket); err != nil {
			return fmt.Errorf("admin.socket: %w", err)
		}
	}
	return nil
}

func cmdConfigCheck(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("config check", stderr)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usageError("usage: nodeld config check [FILE]")
	}
	path := defaultConfigPath
	if len(pos) == 1 {
		path = pos[0]
	}
	// The static checks run does: the config's own, then each
	// component's. Every problem on its own line (the error names the file).
	cfg, err := config.Load(path)
	if err == nil {
		err = checkComponents(cfg, path)
	}
	if err == nil {
		// The nodes the workloads name, as run and a reload resolve them
		// (this node's key and first-contact pins are read from its data dir).
		err = config.CheckNodeRefsFile(cfg, path, mesh.KnownNodesIn(cfg.Node.DataDir))
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return errSilent(2)
	}
	fmt.Fprintf(stdout, "%s: ok\n", path)
	// What run accepts but what makes a part of it idle.
	for _, note := range plane.ConfigNotes(cfg) {
		fmt.Fprintf(stdout, "note: %s\n", note)
	}
	return nil
}

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func buildGoVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.GoVersion
	}
	return "unknown"
}

// reloadConfig reads the config a reload applies: the file at path, or
// the embedded default when path is "".
func reloadConfig(path string) (*config.Config, error) {
	var cfg *config.Config
	var err error
	if path == "" {
		cfg, err = config.LoadEmbedded()
	} else {
		cfg, err = config.Load(path)
	}
	if err != nil {
		return nil, err
	}
	if err := absolutePaths(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

func configSource(path string) string {
	if path == "" {
		return "(embedded default)"
	}
	return path
}
