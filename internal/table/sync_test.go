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
			// Served before the sync, so the release is observable.
			held, err := e.t.RegisterLocal(OriginAdopted, "chat", "http://127.0.0.1:9999", "old", "openai", "x")
			if err != nil {
				t.Fatal(err)
			}
			got := e.t.SyncLocal(t.Context(), held, OriginAdopted, "chat", &tt.probe)
			if got.Registered != tt.wantReg || (got.Slot != nil) != tt.wantReg {
				t.Fatalf("Registered = %v, Slot = %p, want %v", got.Registered, got.Slot, tt.wantReg)
			}
			if tt.wantReg && got.Slot != held {
				t.Fatal("an up instance got a new registration instead of an update of the held one")
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
	var held *LocalSlot
	for i, step := range []struct {
		up   bool
		want bool
	}{{true, true}, {true, true}, {false, false}, {true, true}} {
		p.res.Up = step.up
		got := e.t.SyncLocal(t.Context(), held, OriginAdopted, "chat", p)
		if got.Registered != step.want {
			t.Fatalf("step %d: Registered = %v", i, got.Registered)
		}
		held = got.Slot
	}
	if g := e.t.Generation(); g != 3 {
		t.Fatalf("generation = %d after up, up, down, up; want 3", g)
	}
}

// TestSyncLocalReleasesOnlyItsOwn: a probe that finds the instance down
// withdraws the caller's registration, never another writer's.
func TestSyncLocalReleasesOnlyItsOwn(t *testing.T) {
	e := newEnv()
	if _, err := e.t.RegisterLocal(OriginPlaced, "chat", "http://127.0.0.1:7000", "placed", "openai", "x"); err != nil {
		t.Fatal(err)
	}
	p := &fakeProbe{res: ProbeResult{Up: true, Base: "http://127.0.0.1:8080", API: "openai", Runtime: "ollama"}}
	got := e.t.SyncLocal(t.Context(), nil, OriginAdopted, "chat", p)
	if !got.Registered || got.Slot.Serving() {
		t.Fatalf("adopted sync: Registered = %v, Serving = %v; want registered, standing by", got.Registered, got.Slot.Serving())
	}
	p.res.Up = false
	if got = e.t.SyncLocal(t.Context(), got.Slot, OriginAdopted, "chat", p); got.Registered {
		t.Fatal("registered while down")
	}
	if b, ok := e.t.LocalBaseForRole("chat"); !ok || b != "http://127.0.0.1:7000/v1" {
		t.Fatalf("LocalBaseForRole = %q, %v after the adopted instance went down; want the placed one", b, ok)
	}
}
