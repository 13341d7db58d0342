package table

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

type fakeProbe struct {
	res ProbeResult
	err error
}

func (p *fakeProbe) Probe(context.Context) (ProbeResult, error) { return p.res, p.err }

func TestSyncLocal(t *testing.T) {
	up := ProbeResult{Up: true, Base: "http://127.0.0.1:8080/", Model: "qwen", API: "openai", Runtime: "llama.cpp"}
	errDown := errors.New("connection refused")
	tests := []struct {
		name    string
		probe   fakeProbe
		wantReg bool
		wantErr error
	}{
		{"up registers", fakeProbe{res: up}, true, nil},
		{"probe error deregisters", fakeProbe{err: errDown}, false, errDown},
		{"not up deregisters", fakeProbe{res: ProbeResult{Up: false, Base: up.Base}}, false, errNotUp},
		{"up on a foreign host deregisters", fakeProbe{res: ProbeResult{Up: true, Base: "http://10.0.0.1:80"}}, false, ErrNotLoopback},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv()
			// Served before the sync, so deregistration is observable.
			if err := e.t.RegisterLocal("chat", "http://127.0.0.1:9999", "old", "openai", "x"); err != nil {
				t.Fatal(err)
			}
			got := e.t.SyncLocal(t.Context(), "chat", &tt.probe)
			if got.Registered != tt.wantReg {
				t.Fatalf("Registered = %v, want %v", got.Registered, tt.wantReg)
			}
			if diff := cmp.Diff(tt.wantErr, got.Err, cmpopts.EquateErrors()); diff != "" {
				t.Fatalf("Err (-want +got):\n%s", diff)
			}
			tg, ok := e.t.Resolve("chat")
			if ok != tt.wantReg {
				t.Fatalf("Resolve ok = %v after sync, want %v", ok, tt.wantReg)
			}
			if ok {
				want := Target{Kind: TargetLocal, Base: "http://127.0.0.1:8080", Model: "qwen", Runtime: "llama.cpp"}
				if diff := cmp.Diff(want, tg); diff != "" {
					t.Fatalf("Resolve (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestSyncLocalFollowsTheInstance(t *testing.T) {
	e := newEnv()
	p := &fakeProbe{res: ProbeResult{Up: true, Base: "http://127.0.0.1:8080", API: "openai", Runtime: "ollama"}}
	for i, step := range []struct {
		up   bool
		want bool
	}{{true, true}, {false, false}, {true, true}} {
		p.res.Up = step.up
		if got := e.t.SyncLocal(t.Context(), "chat", p); got.Registered != step.want {
			t.Fatalf("step %d: Registered = %v", i, got.Registered)
		}
	}
	if g := e.t.Generation(); g != 3 {
		t.Fatalf("generation = %d after up, down, up; want 3", g)
	}
}
