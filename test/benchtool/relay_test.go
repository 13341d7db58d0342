package main

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
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
				if err := postChat(client, relay); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// The TLS pairs carry the same exchanges over TLS 1.3 between two relays,
// a connection each or many streams over shared connections, with more
// clients at once than the mux has connections.
func TestTLSRelayPairsCarryExchanges(t *testing.T) {
	cert, key := relayCert(t)
	up := started(t, "upstream")
	for _, mode := range []string{"goroutine", "mux"} {
		t.Run(mode, func(t *testing.T) {
			second := started(t, "relay", "-mode", mode, "-tls-in", "-cert", cert, "-key", key, "-upstream", up)
			first := started(t, "relay", "-mode", mode, "-tls-out", "-cert", cert, "-conns", "2", "-upstream", second)
			var wg sync.WaitGroup
			for range 5 {
				wg.Go(func() {
					client := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
					defer client.CloseIdleConnections()
					for range 20 {
						if err := postChat(client, first); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
		})
	}
}

// postChat posts a chat request through addr and checks that the
// upstream's answer came back.
func postChat(client *http.Client, addr string) error {
	res, err := client.Post("http://"+addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"bench","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		return err
	}
	body, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil || res.StatusCode != 200 || !strings.Contains(string(body), "chatcmpl-bench") {
		return fmt.Errorf("status %d, body %q, err %v", res.StatusCode, body, err)
	}
	return nil
}

// relayCert writes a throwaway Ed25519 certificate for 127.0.0.1 and its
// key, as the bench scripts make with openssl.
func relayCert(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "bench-relay"},
		DNSNames:     []string{"bench-relay"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func TestRelayRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"relay", "-upstream", "192.0.2.1:80"},
		{"relay", "-upstream", "nonsense"},
		{"relay", "-upstream", "127.0.0.1:1", "-listen", "192.0.2.1:0"},
		{"relay", "-upstream", "127.0.0.1:1", "-mode", "threads"},
		{"relay", "-upstream", "127.0.0.1:1", "-tls-out"},
		{"relay", "-upstream", "127.0.0.1:1", "-tls-in", "-cert", "/nonexistent.pem", "-key", "/nonexistent.key"},
		{"relay", "-upstream", "127.0.0.1:1", "-mode", "mux", "-conns", "0"},
	} {
		if err := run(context.Background(), args, io.Discard); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
