package table

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// mustRegister registers a local instance of role at 127.0.0.1:port.
func mustRegister(t *testing.T, tb *Table, origin Origin, role string, port int) *LocalSlot {
	t.Helper()
	s, err := tb.RegisterLocal(origin, role, fmt.Sprintf("http://127.0.0.1:%d", port), fmt.Sprintf("m%d", port), "openai", "x")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// servedBase returns the base role resolves to locally, "" when none.
func servedBase(tb *Table, role string) string {
	tg, ok := tb.Resolve(role)
	if !ok || tg.Kind != TargetLocal {
		return ""
	}
	return tg.Base
}

func TestLocalElection(t *testing.T) {
	type reg struct {
		origin Origin
		port   int
	}
	tests := []struct {
		name string
		give []reg // registered in this order
		// release lists indexes of give to release, in order.
		release []int
		want    string
	}{
		{"placed before adopted", []reg{{OriginPlaced, 1}, {OriginAdopted, 2}}, nil, "http://127.0.0.1:1"},
		{"placed before an older adopted", []reg{{OriginAdopted, 1}, {OriginPlaced, 2}}, nil, "http://127.0.0.1:2"},
		{"same origin: the oldest", []reg{{OriginPlaced, 1}, {OriginPlaced, 2}}, nil, "http://127.0.0.1:1"},
		{"adopted only: the oldest", []reg{{OriginAdopted, 1}, {OriginAdopted, 2}}, nil, "http://127.0.0.1:1"},
		{"oldest placed released: the next placed", []reg{{OriginAdopted, 1}, {OriginPlaced, 2}, {OriginPlaced, 3}}, []int{1}, "http://127.0.0.1:3"},
		{"newest placed released: the oldest stays", []reg{{OriginPlaced, 1}, {OriginPlaced, 2}}, []int{1}, "http://127.0.0.1:1"},
		{"every placed released: the adopted", []reg{{OriginPlaced, 1}, {OriginAdopted, 2}, {OriginPlaced, 3}}, []int{0, 2}, "http://127.0.0.1:2"},
		{"adopted released: the placed stays", []reg{{OriginAdopted, 1}, {OriginPlaced, 2}}, []int{0}, "http://127.0.0.1:2"},
		{"all released", []reg{{OriginAdopted, 1}, {OriginPlaced, 2}}, []int{1, 0}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := New(self, Options{})
			slots := make([]*LocalSlot, len(tt.give))
			for i, r := range tt.give {
				slots[i] = mustRegister(t, tb, r.origin, "chat", r.port)
			}
			for _, i := range tt.release {
				slots[i].Release()
			}
			if got := servedBase(tb, "chat"); got != tt.want {
				t.Fatalf("served base = %q, want %q", got, tt.want)
			}
			// Exactly the elected registration reports Serving.
			for i, s := range slots {
				want := tt.want != "" && s.entry.base == tt.want && !s.released
				if s.Serving() != want {
					t.Errorf("slot %d (%s :%d) Serving = %v, want %v", i, s.Origin(), tt.give[i].port, s.Serving(), want)
				}
			}
		})
	}
}

// TestTwoPlacedInstancesOfOneRole: stopping either of two instances of a
// role leaves the other serving. By role name only, the one registered
// last took the role over and its stop left the role dark.
func TestTwoPlacedInstancesOfOneRole(t *testing.T) {
	for _, stop := range []int{0, 1} {
		t.Run(fmt.Sprintf("stop %d", stop), func(t *testing.T) {
			tb := New(self, Options{})
			slots := []*LocalSlot{
				mustRegister(t, tb, OriginPlaced, "chat", 1),
				mustRegister(t, tb, OriginPlaced, "chat", 2),
			}
			slots[stop].Release()
			want := fmt.Sprintf("http://127.0.0.1:%d", 2-stop)
			if got := servedBase(tb, "chat"); got != want {
				t.Fatalf("served base = %q after stopping instance %d, want %q", got, stop, want)
			}
		})
	}
}

// TestAdoptedDownKeepsPlaced: the adopted server going down withdraws only
// the adopter's registration; the placed instance keeps the role.
func TestAdoptedDownKeepsPlaced(t *testing.T) {
	tb := New(self, Options{})
	placed := mustRegister(t, tb, OriginPlaced, "chat", 1)
	adopted := mustRegister(t, tb, OriginAdopted, "chat", 2)
	adopted.Release()
	if got := servedBase(tb, "chat"); got != "http://127.0.0.1:1" {
		t.Fatalf("served base = %q after the adopted server went down, want the placed one", got)
	}
	// And the other way round: the placed instance stopping hands the
	// role to a standing-by adopted server at once.
	adopted = mustRegister(t, tb, OriginAdopted, "chat", 2)
	placed.Release()
	if got := servedBase(tb, "chat"); got != "http://127.0.0.1:2" || !adopted.Serving() {
		t.Fatalf("served base = %q after the placed instance stopped, want the adopted one", got)
	}
}

func TestLocalReleaseIsIdempotent(t *testing.T) {
	e := newEnv()
	keep := mustRegister(t, e.t, OriginPlaced, "chat", 1)
	other := mustRegister(t, e.t, OriginPlaced, "chat", 2)
	other.Release()
	gen := e.t.Generation()
	ch, cancel := e.t.Subscribe()
	defer cancel()

	other.Release()
	var never *LocalSlot
	never.Release()
	if err := other.Update("http://127.0.0.1:3", "m", "openai", "x"); !errors.Is(err, ErrReleased) {
		t.Fatalf("Update of a released slot = %v, want ErrReleased", err)
	}
	if g := e.t.Generation(); g != gen {
		t.Fatalf("generation moved from %d to %d on releases of released slots", gen, g)
	}
	select {
	case <-ch:
		t.Fatal("subscribers woken by a release of a released slot")
	default:
	}
	if other.Serving() {
		t.Fatal("a released slot reports serving")
	}
	if got := servedBase(e.t, "chat"); got != "http://127.0.0.1:1" || !keep.Serving() {
		t.Fatalf("served base = %q; the remaining registration must still serve", got)
	}
	if n := len(e.t.local["chat"]); n != 1 {
		t.Fatalf("%d registrations of chat kept, want 1", n)
	}
}

// TestLocalGenerationFollowsTheElected: the generation is bumped, and
// subscribers woken, exactly when the base role resolves to locally
// changes.
func TestLocalGenerationFollowsTheElected(t *testing.T) {
	tb := New(self, Options{})
	ch, cancel := tb.Subscribe()
	defer cancel()
	var adopted, placed, placed2 *LocalSlot
	steps := []struct {
		name string
		do   func()
		bump bool
	}{
		{"adopted registers", func() { adopted = mustRegister(t, tb, OriginAdopted, "chat", 1) }, true},
		{"adopted updates its model only", func() { _ = adopted.Update("http://127.0.0.1:1", "m2", "openai", "x") }, false},
		{"placed registers and is elected", func() { placed = mustRegister(t, tb, OriginPlaced, "chat", 2) }, true},
		{"second placed stands by", func() { placed2 = mustRegister(t, tb, OriginPlaced, "chat", 3) }, false},
		{"standby updates its base", func() { _ = placed2.Update("http://127.0.0.1:4", "m", "openai", "x") }, false},
		{"adopted updates its base, standing by", func() { _ = adopted.Update("http://127.0.0.1:5", "m", "openai", "x") }, false},
		{"standby released", func() { placed2.Release() }, false},
		{"elected updates its base", func() { _ = placed.Update("http://127.0.0.1:6", "m", "openai", "x") }, true},
		{"a standby on the elected base", func() { placed2 = mustRegister(t, tb, OriginPlaced, "chat", 6) }, false},
		{"elected released, same base survives", func() { placed.Release() }, false},
		{"elected released, adopted takes over", func() { placed2.Release() }, true},
		{"refused update", func() { _ = adopted.Update("http://10.0.0.1:1", "m", "openai", "x") }, false},
		{"other role", func() { mustRegister(t, tb, OriginAdopted, "embed", 7) }, true},
		{"last released", func() { adopted.Release() }, true},
	}
	for _, s := range steps {
		select { // drain any earlier wake-up
		case <-ch:
		default:
		}
		before := tb.Generation()
		s.do()
		if got := tb.Generation() - before; got != map[bool]uint64{false: 0, true: 1}[s.bump] {
			t.Errorf("%s: generation moved by %d, want bump %v", s.name, got, s.bump)
		}
		woken := false
		select {
		case <-ch:
			woken = true
		default:
		}
		if woken != s.bump {
			t.Errorf("%s: subscribers woken = %v, want %v", s.name, woken, s.bump)
		}
	}
}

// TestLocalUpdateChangesWhatIsServed: an Update of the elected slot is what
// every reader sees: Resolve, LocalBaseForRole, LocalForPeer, the
// advertisement and the snapshot.
func TestLocalUpdateChangesWhatIsServed(t *testing.T) {
	e := newEnv()
	e.t.ExposeToMesh("chat", true)
	e.t.AllowMeshPeer("chat", "n-a", true)
	s := mustRegister(t, e.t, OriginPlaced, "chat", 1)
	if err := s.Update("http://127.0.0.1:2/", "qwen", "openai", "llama.cpp"); err != nil {
		t.Fatal(err)
	}
	const base = "http://127.0.0.1:2"
	if tg, _ := e.t.Resolve("chat"); tg != (Target{Kind: TargetLocal, Base: base, Model: "qwen", Runtime: "llama.cpp"}) {
		t.Errorf("Resolve = %+v", tg)
	}
	if b, _ := e.t.LocalBaseForRole("chat"); b != base+"/v1" {
		t.Errorf("LocalBaseForRole = %q", b)
	}
	if ml, _ := e.t.LocalForPeer("chat", "n-a"); ml != (MeshLocal{Base: base, Model: "qwen", Runtime: "llama.cpp"}) {
		t.Errorf("LocalForPeer = %+v", ml)
	}
	ad, ok := e.t.Advertisement("chat", time.Unix(1, 0))
	if !ok || ad.Metadata[MetaModel] != "qwen" || ad.Metadata[MetaRuntime] != "llama.cpp" {
		t.Errorf("Advertisement = %+v, %v", ad, ok)
	}
	if l := e.t.Snapshot().Roles[0].Local; l == nil || l.Base != base || l.Origin != OriginPlaced {
		t.Errorf("snapshot local = %+v", l)
	}
	// A refused update leaves the slot as it was.
	if err := s.Update("http://10.0.0.1:2", "x", "openai", "x"); !errors.Is(err, ErrNotLoopback) {
		t.Fatalf("Update(non-loopback) = %v, want ErrNotLoopback", err)
	}
	if b, _ := e.t.LocalBaseForRole("chat"); b != base+"/v1" {
		t.Errorf("LocalBaseForRole after a refused update = %q", b)
	}
}

func TestRegisterLocalRefusesUnknownOrigin(t *testing.T) {
	tb := New(self, Options{})
	for _, o := range []Origin{0, OriginAdopted + 1} {
		if s, err := tb.RegisterLocal(o, "chat", "http://127.0.0.1:1", "", "openai", "x"); err == nil || s != nil {
			t.Errorf("RegisterLocal(origin %d) = %v, %v; want refused", o, s, err)
		}
	}
	if g := tb.Generation(); g != 0 {
		t.Fatalf("generation = %d after refusals", g)
	}
}

func TestOriginText(t *testing.T) {
	for _, o := range []Origin{OriginPlaced, OriginAdopted} {
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		var got Origin
		if err := json.Unmarshal(b, &got); err != nil || got != o {
			t.Errorf("%s round-trips to %v, %v", b, got, err)
		}
	}
	var o Origin
	if err := o.UnmarshalText([]byte("managed")); err == nil {
		t.Error("unknown origin decoded")
	}
}

// TestConcurrentRegistrations churns registrations of one role from several
// goroutines, under -race, while readers resolve it: the oldest placed
// registration is elected throughout, and nothing is left once every
// writer released its own.
func TestConcurrentRegistrations(t *testing.T) {
	tb := New(self, Options{})
	pinned := mustRegister(t, tb, OriginPlaced, "chat", 1)
	const writers, rounds = 4, 200
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			origin := []Origin{OriginPlaced, OriginAdopted}[w%2]
			for i := range rounds {
				s, err := tb.RegisterLocal(origin, "chat", fmt.Sprintf("http://127.0.0.1:%d", 1000+w*rounds+i), "m", "openai", "x")
				if err != nil {
					t.Error(err)
					return
				}
				if i%2 == 0 {
					_ = s.Update(fmt.Sprintf("http://127.0.0.1:%d", 2000+w*rounds+i), "m2", "openai", "x")
				}
				if s.Serving() {
					t.Errorf("writer %d's registration elected over the oldest placed one", w)
				}
				s.Release()
				s.Release()
			}
		})
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if got := servedBase(tb, "chat"); got != "http://127.0.0.1:1" {
					t.Errorf("chat served by %q during churn, want the pinned registration", got)
					return
				}
				tb.Snapshot()
				tb.Advertisements(time.Now())
			}
		})
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	if !pinned.Serving() {
		t.Fatal("the pinned registration lost the election")
	}
	pinned.Release()
	if got := servedBase(tb, "chat"); got != "" {
		t.Fatalf("chat served by %q after every release", got)
	}
	if n := len(tb.local); n != 0 {
		t.Fatalf("%d roles left in the local map", n)
	}
}
