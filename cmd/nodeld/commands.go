package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/heapgoal"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/operator"
	"github.com/nodeld/nodeld/internal/procs"
	"github.com/nodeld/nodeld/internal/sandbox"
)

// chainFileName is the audit chain's file name inside the data directory.
const chainFileName = "chain.log"

func cmdKeygen(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("keygen", stderr)
	cfgPath := fs.String("config", "", "config file (default "+defaultConfigPath+", else the embedded default)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageError("usage: nodeld keygen [--config FILE]")
	}
	cfg, _, err := loadConfig(*cfgPath, true)
	if err != nil {
		return err
	}
	path := identity.KeyPath(cfg.Node.DataDir)
	id, err := identity.Generate(path)
	if errors.Is(err, identity.ErrKeyExists) {
		return fmt.Errorf("%s already exists; it is never overwritten (nodeld id prints it)", path)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "created %s\nnode id:    %s\npublic key: %s\n", path, id.ID(), id.PublicKeyHex())
	return nil
}

func cmdID(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("id", stderr)
	cfgPath := fs.String("config", "", "config file (default "+defaultConfigPath+", else the embedded default)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageError("usage: nodeld id [--config FILE]")
	}
	cfg, _, err := loadConfig(*cfgPath, true)
	if err != nil {
		return err
	}
	id, err := identity.Load(identity.KeyPath(cfg.Node.DataDir))
	if errors.Is(err, identity.ErrKeyNotFound) {
		return fmt.Errorf("%w (run nodeld keygen first)", err)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "node id:    %s\npublic key: %s\n", id.ID(), id.PublicKeyHex())
	return nil
}

func cmdChainVerify(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("chain verify", stderr)
	keyHex := fs.String("key", "", "public key hex the chain must be signed by (default: the node key when FILE is not given, else the chain's genesis key)")
	cfgPath := fs.String("config", "", "config file, to find the chain and key when FILE is not given")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usageError("usage: nodeld chain verify [FILE] [--key HEX] [--config FILE]")
	}
	var pub ed25519.PublicKey
	if *keyHex != "" {
		if pub, err = identity.ParsePublicKeyHex(*keyHex); err != nil {
			return usageError("--key: %v", err)
		}
	}
	var path string
	if len(pos) == 1 {
		path = pos[0]
	} else {
		cfg, _, err := loadConfig(*cfgPath, true)
		if err != nil {
			return err
		}
		path = filepath.Join(cfg.Node.DataDir, chainFileName)
		if pub == nil {
			// The node's own chain must be signed by the node's own key.
			if id, err := identity.Load(identity.KeyPath(cfg.Node.DataDir)); err == nil {
				pub = id.PublicKey()
			}
		}
	}
	res, err := chain.VerifyFile(path, pub)
	if err != nil {
		var ve *chain.VerifyError
		if errors.As(err, &ve) {
			fmt.Fprintf(stderr, "%s: broken at index %d: %v\n", path, ve.Index, err)
			return errSilent(1)
		}
		return err
	}
	fmt.Fprintf(stdout, "%s: ok: %d entries, head seq %d hash %s, signed by %s\n",
		path, res.Entries, res.Head.Seq, res.Head.Hash, identity.NodeID(res.PublicKey))
	return nil
}

// statusTimeout bounds the status command's request.
const statusTimeout = 5 * time.Second

func cmdStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", stderr)
	cfgPath := fs.String("config", "", "config file, to find the admin address")
	addr := fs.String("addr", "", "admin address HOST:PORT (overrides the config)")
	asJSON := fs.Bool("json", false, "print the raw JSON")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageError("usage: nodeld status [--config FILE] [--addr HOST:PORT] [--json]")
	}
	if *addr == "" {
		cfg, _, err := loadConfig(*cfgPath, true)
		if err != nil {
			return err
		}
		*addr = cfg.Admin.Listen
	}
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+*addr+"/v1/status", nil)
	if err != nil {
		return usageError("--addr: %v", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("is nodeld running? %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("read status: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status: %s", resp.Status)
	}
	if *asJSON {
		_, err := stdout.Write(body)
		return err
	}
	var st operator.StatusDoc
	if err := json.Unmarshal(body, &st); err != nil {
		return fmt.Errorf("decode status: %w", err)
	}
	printStatus(stdout, &st)
	fmt.Fprintf(stdout, "page     http://%s/ui/\n", *addr) // the fleet page
	return nil
}

func printStatus(w io.Writer, st *operator.StatusDoc) {
	name := st.Name
	if name == "" {
		name = "(unnamed)"
	}
	fmt.Fprintf(w, "node     %s  %s  version %s  up %s\n", st.NodeID, name, st.Version,
		(time.Duration(st.UptimeSeconds) * time.Second).String())
	fmt.Fprintf(w, "chain    %d entries, head seq %d %s\n", st.Chain.Entries, st.Chain.Seq, shortHash(st.Chain.Hash))
	reload := "ok"
	if !st.Config.LastReloadSuccessful {
		reload = "FAILED: " + st.Config.LastReloadError
	}
	src := st.Config.Path
	if src == "" {
		src = "(embedded default)"
	}
	fmt.Fprintf(w, "config   %s  last reload %s\n", src, reload)
	if len(st.Roles) == 0 {
		fmt.Fprintln(w, "roles    none")
	}
	for _, r := range st.Roles {
		target := "none (503)"
		if r.Resolved != "" {
			target = r.Resolved
		}
		if r.WaitingForLink {
			target += " (restarted or stopped, waiting for its link)"
		}
		if r.Resolved == "" && r.OnDemand != "" {
			target = r.OnDemand + " (on demand from " + r.OnDemandFrom + ")"
		}
		fmt.Fprintf(w, "role     %-12s %-22s -> %s\n", r.Name, r.Listen, target)
	}
	if st.Mesh != nil {
		fmt.Fprintf(w, "mesh     %s, %d peers\n", st.Mesh.Listen, len(st.Mesh.Peers))
		for _, p := range st.Mesh.Peers {
			id := p.ID
			if id == "" {
				id = "(key not yet seen)"
			}
			extra := ""
			if p.LastError != "" {
				extra = "  (" + p.LastError + ")"
			}
			fmt.Fprintf(w, "peer     %-12s %-21s %-18s %-12s %-8s rtt %.2fms%s\n", p.Name, p.Addr, id, p.State, p.Tier, p.RTTMillis, extra)
		}
	}
	if st.Host != nil {
		state := "disabled"
		if st.Host.Enabled {
			state = "enabled"
		}
		fmt.Fprintf(w, "host     %s, %d in flight, %d instances, %d departed\n", state, len(st.Host.InFlight), len(st.Host.Instances), len(st.Host.Departed))
		if iso := st.Host.Isolation; iso != nil {
			fmt.Fprintf(w, "isolate  %s\n", isolationLine(*iso))
		}
		for _, in := range st.Host.Instances {
			role := in.Role
			if role == "" {
				role = "-"
			}
			fmt.Fprintf(w, "placed   %-40s %s %s role %s %s%s restarts %d\n", in.ID, in.Package, in.Version, role, in.State,
				reasonSinceText(in.Reason, in.Since), in.Restarts)
		}
	}
	if c := st.Controller; c != nil {
		fmt.Fprintf(w, "control  %d targets (%s), placements %s, %d unsettled\n", len(c.Targets),
			countsText(c.TargetsByLiveness, "alive", "suspect", "dead"),
			countsText(c.PlacementsByLife, "placed", "dispatching", "unsettled", "lost", "rescheduled"), c.Unsettled)
		if r := c.Raft; r != nil {
			fmt.Fprintf(w, "raft     %s, term %d, leader %s\n", r.Role, r.Term, leaderText(r))
		}
		if len(c.DeclarationsByState) > 0 {
			fmt.Fprintf(w, "declared %s\n", declaredText(c))
		}
		for _, t := range c.Targets {
			name := t.Name
			if name == "" {
				name = "-"
			}
			fmt.Fprintf(w, "target   %-12s %-18s %-10s %s\n", name, t.ID, t.Tier, t.Liveness)
		}
		for _, p := range c.Capped {
			fmt.Fprintf(w, "capped   %s decision %s lost on %s, moved %d times in reschedule_window: nodeld ctl start %s places it again\n",
				p.Workload, shortHash(p.DecisionID), p.Node, p.Moves, p.DecisionID[:min(16, len(p.DecisionID))])
		}
	}
	insts := append([]operator.InstanceDoc(nil), st.Instances...)
	sort.SliceStable(insts, func(i, j int) bool { return insts[i].Role < insts[j].Role })
	for _, in := range insts {
		extra := ""
		if in.LastError != "" {
			extra = "  (" + in.LastError + ")"
		}
		model := in.Model
		if model == "" {
			model = "-"
		}
		if in.Discovered {
			extra = "  (discovered)" + extra
		}
		fmt.Fprintf(w, "instance %-12s %-9s %-28s %-8s model %s%s\n", in.Role, in.Kind, in.URL, in.Health, model, extra)
	}
}

func shortHash(h string) string {
	if len(h) > 16 {
		return h[:16] + "..."
	}
	return strings.TrimSpace(h)
}

// countsText renders counts as "2 alive, 1 dead" in the order of keys
// given, leaving out zeros; "none" when all are zero.
func countsText(m map[string]int, keys ...string) string {
	var parts []string
	for _, k := range keys {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// isolationLine is the line nodeld status prints: what is enforced.
func isolationLine(s sandbox.Support) string {
	line := s.String()
	if s.Problem != "" {
		line += "; " + s.Problem
	}
	return line
}

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", stderr)
	cfgPath := fs.String("config", "", "config file (default "+defaultConfigPath+", else the embedded default)")
	chainReset := fs.Bool("chain-reset", false, "archive a broken audit chain and start a new one")
	// --test-* flags exist in a nodeld_testhooks build only (testhooks.go).
	test := testHookFlags(fs)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageError("usage: nodeld run [--config FILE] [--chain-reset]")
	}
	cfg, path, err := loadConfig(*cfgPath, *cfgPath == "")
	if err != nil {
		return err
	}
	if os.Getenv("GOGC") == "" {
		// Go's rule alone collects a node's few MB of live heap ten
		// times a second under load (README, "Memory").
		defer heapgoal.Keep(heapGoalHeadroom, 100)()
	}
	if os.Getenv("GOMAXPROCS") == "" {
		// One thread until the load needs more (README, "CPU threads").
		defer procs.Adapt(runtime.GOMAXPROCS(0))()
	}
	return runDaemon(ctx, daemonOptions{
		cfg:        cfg,
		cfgPath:    path,
		chainReset: *chainReset,
		test:       test(),
		stderr:     stderr,
	})
}

// heapGoalHeadroom is how far above the live heap the daemon's heap may
// grow before the next collection, unless GOGC is set.
const heapGoalHeadroom = 16 << 20

// daemonOptions are nodeld run's flags and config.
type daemonOptions struct {
	cfg        *config.Config
	cfgPath    string // "" = embedded default
	chainReset bool
	test       testFlags // a nodeld_testhooks build's --test-* flags
	stderr     io.Writer
}

// leaderText names a replicated controller's leader for nodeld status.
func leaderText(r *operator.RaftDoc) string {
	switch {
	case r.Leader == "":
		return "none known (no quorum: writes wait, reads answer from this replica)"
	case r.LeaderName == config.SelfRef:
		return "this node"
	case r.LeaderName != "":
		return r.LeaderName + " (" + r.Leader + ")"
	}
	return r.Leader
}
