package runner

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
)

// fakeProbes answers the probe client's requests in a synctest bubble as
// the test says: "up" (200 with model m listed), "stall" (no answer until
// the probe times out), "reset" (the connection reset), "refused" (nothing
// listens), "other" (200 listing another model only) or an HTTP status.
type fakeProbes struct {
	mu     sync.Mutex
	answer string
}

func (f *fakeProbes) set(answer string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answer = answer
}

func (f *fakeProbes) RoundTrip(req *http.Request) (*http.Response, error) {
	f.mu.Lock()
	answer := f.answer
	f.mu.Unlock()
	list := func(id string) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Request: req,
			Body: io.NopCloser(strings.NewReader(`{"object":"list","data":[{"id":"` + id + `"}]}`))}, nil
	}
	switch answer {
	case "up":
		return list("m")
	case "other":
		return list("qwen")
	case "stall":
		<-req.Context().Done()
		return nil, req.Context().Err()
	case "reset":
		return nil, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	case "refused":
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	code, err := strconv.Atoi(answer)
	if err != nil {
		panic("fakeProbes: unknown answer " + answer)
	}
	return &http.Response{StatusCode: code, Header: http.Header{}, Request: req, Body: io.NopCloser(strings.NewReader(""))}, nil
}

// fakedAdopter is an Adopter of one openai instance (role chat, model m)
// whose probes fakeProbes answers, run in the caller's synctest bubble
// with a round every second and a probe timeout of 300 ms.
type fakedAdopter struct {
	a     *Adopter
	reg   *fakeRegistrar
	prom  *prometheus.Registry
	probe *fakeProbes
}

func startFaked(t *testing.T) *fakedAdopter {
	t.Helper()
	f := &fakedAdopter{reg: &fakeRegistrar{}, prom: prometheus.NewRegistry(), probe: &fakeProbes{answer: "up"}}
	cfg := AdopterConfig{
		Instances:    []AdoptedInstance{{Role: "chat", Kind: KindOpenAI, URL: "http://127.0.0.1:9", Model: "m"}},
		Interval:     time.Second,
		ProbeTimeout: 300 * time.Millisecond,
	}
	a, err := NewAdopter(cfg, f.reg, zaptest.NewLogger(t), f.prom)
	if err != nil {
		t.Fatal(err)
	}
	a.client.Transport = f.probe
	f.a = a
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	// Halfway between rounds: the round at 0 is done, the next one at 1 s
	// (and its probe, 300 ms at most) is done by the next step.
	time.Sleep(500 * time.Millisecond)
	synctest.Wait()
	return f
}

// round answers the next round's probe with answer and waits until that
// round is done.
func (f *fakedAdopter) round(answer string) {
	f.probe.set(answer)
	time.Sleep(time.Second)
	synctest.Wait()
}

// serving reports whether chat is registered, and the instance's status.
func (f *fakedAdopter) serving() (bool, InstanceStatus) {
	_, ok := f.reg.snapshot()["chat"]
	return ok, f.a.Status()[0]
}

// TestAdopterKeepsAnUpInstanceThroughMisses: probes that get no answer (a
// timeout, a reset connection) take an instance that is up down only at
// the MissLimit-th in a row; an answer that it is up in between starts the
// count again, and an instance that is not up is not kept up by it.
func TestAdopterKeepsAnUpInstanceThroughMisses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := startFaked(t)
		if ok, st := f.serving(); !ok || st.Health != HealthUp {
			t.Fatalf("at start: registered %v, status %+v; want up and registered", ok, st)
		}
		step := 0
		want := func(registered bool, health Health, missedErr bool) {
			t.Helper()
			step++
			ok, st := f.serving()
			if ok != registered || st.Health != health || (st.LastError != "") != missedErr || st.Serving != registered {
				t.Errorf("round %d: registered %v, status %+v; want registered %v, health %s, an error %v", step, ok, st, registered, health, missedErr)
			}
		}
		f.round("stall")
		want(true, HealthUp, true)
		f.round("reset")
		want(true, HealthUp, true)
		f.round("up") // the count starts again
		want(true, HealthUp, false)
		f.round("stall")
		want(true, HealthUp, true)
		f.round("stall")
		want(true, HealthUp, true)
		f.round("stall") // the third in a row
		want(false, HealthDown, true)
		f.round("up")
		want(true, HealthUp, false)

		wantCalls := []regCall{{"register", "chat", "http://127.0.0.1:9"}, {"release", "chat", ""}, {"register", "chat", "http://127.0.0.1:9"}}
		if diff := cmp.Diff(wantCalls, f.reg.takeCalls()); diff != "" {
			t.Errorf("registrar calls (-want +got):\n%s", diff)
		}
		got := gather(t, f.prom)
		for result, n := range map[string]float64{"up": 3, "missed": 5, "down": 0} {
			if k := `nodeld_runtime_probes_total{result="` + result + `",role="chat"}`; got[k] != n {
				t.Errorf("%s = %v, want %v", k, got[k], n)
			}
		}
	})
}

// TestAdopterDropsAtOnceOnAnAnswer: an answer that the instance is not up
// (nothing listening, a status other than 200, the model not listed) takes
// it down at once, even amid missed probes.
func TestAdopterDropsAtOnceOnAnAnswer(t *testing.T) {
	for _, tc := range []struct {
		answer string
		health Health
		result string
	}{
		{"refused", HealthDown, "down"},
		{"503", HealthLoading, "loading"},
		{"500", HealthDown, "down"},
		{"404", HealthDown, "down"},
		{"other", HealthModelMissing, "model_missing"},
	} {
		t.Run(tc.answer, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := startFaked(t)
				f.round("stall")
				if ok, st := f.serving(); !ok || st.Health != HealthUp {
					t.Fatalf("after one missed probe: registered %v, status %+v; want kept up", ok, st)
				}
				f.round(tc.answer)
				if ok, st := f.serving(); ok || st.Health != tc.health || st.LastError == "" {
					t.Errorf("after %s: registered %v, status %+v; want withdrawn, %s, with its error", tc.answer, ok, st, tc.health)
				}
				k := `nodeld_runtime_probes_total{result="` + tc.result + `",role="chat"}`
				if got := gather(t, f.prom)[k]; got != 1 {
					t.Errorf("%s = %v, want 1", k, got)
				}
			})
		})
	}
}
