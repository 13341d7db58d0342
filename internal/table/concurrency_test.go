package table

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestConcurrentUse drives every entry point from several goroutines; run
// with -race it checks the locking, and it checks that no call deadlocks
// with an Admission and an Auditor that call back into the table.
func TestConcurrentUse(t *testing.T) {
	adm := newAdmission("n-b", "n-c")
	var tb *Table
	audit := auditorFunc(func(string, string, any) error {
		_ = tb.Generation() // re-entrant read from the auditor
		return nil
	})
	tb = New(self, Options{Admission: adm, Audit: audit, Load: func(string) (int, int) { return 1, 2 }})
	ch, cancel := tb.Subscribe()
	defer cancel()

	const workers, rounds = 6, 200
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			role := []string{"chat", "embed"}[w%2]
			node := []string{"n-b", "n-c"}[w%2]
			origin := []Origin{OriginPlaced, OriginAdopted}[w/2%2]
			var slot *LocalSlot
			for i := range rounds {
				switch i % 12 {
				case 0:
					slot.Release()
					slot, _ = tb.RegisterLocal(origin, role, fmt.Sprintf("http://127.0.0.1:%d", 1000+i), "m", "openai", "x")
				case 1:
					if i%24 == 1 {
						_ = slot.Update(fmt.Sprintf("http://127.0.0.1:%d", 2000+i), "m2", "openai", "x")
						slot.Serving()
					} else {
						slot.Release()
					}
				case 2:
					tb.AllowRemoteNode(role, node, i%24 == 2)
				case 3:
					tb.IngestAdvertisement(node, ad(role, node, MetaLoad, fmt.Sprint(i%3)))
				case 4:
					tb.ExposeToMesh(role, i%24 == 4)
				case 5:
					tb.AllowMeshPeer(role, node, true)
				case 6:
					tb.ApplyPolicy(map[string]RolePolicy{role: {Expose: true, UseFrom: []string{node}}})
				case 7:
					tb.Resolve(role)
					tb.BaseURLForRole(role)
					tb.LocalForPeer(role, node)
					_, h, _ := tb.ResolveHeld(role)
					_, h2, _ := tb.LocalForPeerHeld(role, node)
					slot.Drained()
					h.Done()
					h2.Done()
				case 8:
					tb.Advertisements(time.Now())
					tb.Snapshot()
				case 9:
					tb.RemoveNode(node)
					adm.set(node, i%2 == 0)
				case 10:
					tb.SetProxyPort(role, uint16(i))
					tb.ExposedRoles()
					tb.PeerListedAny(node)
				case 11:
					select {
					case <-ch:
					default:
					}
				}
			}
			slot.Release()
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("concurrent use did not finish: deadlock?")
	}
	// Every worker released what it registered: nothing is left.
	for _, role := range []string{"chat", "embed"} {
		if b, ok := tb.LocalBaseForRole(role); ok {
			t.Errorf("%s still served locally at %s after every release", role, b)
		}
	}
}

type auditorFunc func(source, kind string, payload any) error

func (f auditorFunc) Record(s, k string, p any) error { return f(s, k, p) }
