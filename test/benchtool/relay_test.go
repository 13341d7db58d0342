package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// started runs a benchtool command until the test ends and returns the
// address it printed ("listening ADDR").
func started(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, pw) }()
	t.Cleanup(func() {
		cancel()
		_ = pr.Close()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: %v", args[0], err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s did not stop", args[0])
		}
	})
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(pr).ReadString('\n')
		line <- s
		_, _ = io.Copy(io.Discard, pr)
	}()
	select {
	case s := <-line:
		addr, ok := strings.CutPrefix(strings.TrimSpace(s), "listening ")
		if !ok {
			t.Fatalf("%s printed %q", args[0], s)
		}
		return addr
	case err := <-done:
		t.Fatalf("%s: %v", args[0], err)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not listen", args[0])
	}
	return ""
}

// Both relays carry keep-alive chat exchanges to the upstream and back,
// and stop with their context.
func TestRelayCarriesExchanges(t *testing.T) {
	up := started(t, "upstream")
	for _, mode := range []string{"goroutine", "epoll"} {
		t.Run(mode, func(t *testing.T) {
			relay := started(t, "relay", "-mode", mode, "-upstream", up)
			client := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
			defer client.CloseIdleConnections()
			for range 20 {
				res, err := client.Post("http://"+relay+"/v1/chat/completions", "application/json",
					strings.NewReader(`{"model":"bench","messages":[{"role":"user","content":"hi"}]}`))
				if err != nil {
					t.Fatal(err)
				}
				body, err := io.ReadAll(res.Body)
				_ = res.Body.Close()
				if err != nil || res.StatusCode != 200 || !strings.Contains(string(body), "chatcmpl-bench") {
					t.Fatalf("status %d, body %q, err %v", res.StatusCode, body, err)
				}
			}
		})
	}
}

func TestRelayRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"relay", "-upstream", "192.0.2.1:80"},
		{"relay", "-upstream", "nonsense"},
		{"relay", "-upstream", "127.0.0.1:1", "-listen", "192.0.2.1:0"},
		{"relay", "-upstream", "127.0.0.1:1", "-mode", "threads"},
	} {
		if err := run(context.Background(), args, io.Discard); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
