package main

import (
	"encoding/json"
	"io"
	"testing"

	"github.com/nodeld/nodeld/internal/operator"
)

// FuzzPrintReadable: the CLI prints what the operator socket answers, and
// the result carries what other nodes said (describe, status, logs). Any
// answer line, for any verb, decodes as DialOperator decodes it and
// prints without a panic.
func FuzzPrintReadable(f *testing.F) {
	f.Add([]byte(`{"ok":true,"class":"ok","node":"n-1","result":{"facts":{"payload":"x"},"advertisement":{"name":"a"},"chain_head":"h"}}`), uint8(0), false)
	f.Add([]byte(`{"ok":true,"class":"ok","result":{"instance_id":"i","status":{"state":"running","exit_code":3,"detail":"d"}}}`), uint8(1), true)
	f.Add([]byte(`{"ok":true,"class":"ok","result":{"instances":[{"instance_id":"i","status":{"state":"failed"}}],"in_flight":["d"],"departed":[{"instance_id":"j","reason":"unloaded"}]}}`), uint8(5), false)
	f.Add([]byte(`{"ok":true,"class":"ok","result":{"stdout":"a\x1b[2J","stderr":"","exit_code":1,"truncated":true,"note":"n"}}`), uint8(6), false)
	f.Add([]byte(`{"ok":true,"class":"ok","result":{"explain":"x","outcome":"dry_run","node":""}}`), uint8(1), false)
	f.Add([]byte(`{"ok":true,"class":"ok","result":[{"decision_id":"`+"0123456789abcdef0123"+`","life":"placed","replaced_by":"abc"}]}`), uint8(10), false)
	f.Add([]byte(`{"ok":true,"class":"ok","result":[{"id":"n-1","has_facts":true,"facts_age_seconds":1e300,"mem_free_bytes":18446744073709551615,"vram_free_bytes":1,"gpus":1,"instances":-1}]}`), uint8(11), false)
	f.Add([]byte(`{"class":"refused","code":"x","reason":"y"}`), uint8(12), false)
	f.Add([]byte(`{"result":[1,2}`), uint8(0), false)
	verbs := []string{operator.VerbDescribe, operator.VerbPlace, operator.VerbStart, operator.VerbStop, operator.VerbUnload,
		operator.VerbStatus, operator.VerbLogs, operator.VerbRevoke, operator.VerbUnrevoke, operator.VerbExplain, operator.VerbPlacements, operator.VerbNodes, "other"}
	f.Fuzz(func(t *testing.T, line []byte, verb uint8, named bool) {
		var resp operator.Response
		if json.Unmarshal(line, &resp) != nil {
			return
		}
		req := operator.Request{Verb: verbs[int(verb)%len(verbs)]}
		if named {
			req.Node, req.Args.Instance = "self", "i-1"
		}
		printReadable(io.Discard, req, resp)
	})
}

// FuzzPrintStatus: `nodeld status` prints what answers on the admin
// address, which is whatever listens there. Any body decodes and prints
// without a panic.
func FuzzPrintStatus(f *testing.F) {
	f.Add([]byte(`{"node_id":"n-1","name":"a","version":"v","uptime_seconds":5,"chain":{"entries":2,"seq":2,"hash":"0123456789abcdef0123"},"config":{"last_reload_successful":false,"last_reload_error":"e"},"roles":[{"name":"chat","listen":"127.0.0.1:1","resolved":"x"}]}`))
	f.Add([]byte(`{"mesh":{"listen":"x","peers":[{"name":"p","rtt_ms":1.5,"last_error":"e"}]},"host":{"enabled":true,"instances":[{"id":"i"}]},"controller":{"targets":[{"id":"n"}],"targets_by_liveness":{"alive":1},"placements_by_life":{"placed":-1}}}`))
	f.Add([]byte(`{"instances":[{"role":"b","discovered":true},{"role":"a","last_error":"x"}],"uptime_seconds":-9223372036854775808}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var st operator.StatusDoc
		if json.Unmarshal(body, &st) != nil {
			return
		}
		printStatus(io.Discard, &st)
	})
}
