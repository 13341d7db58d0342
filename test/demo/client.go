package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// clientLine is what the client prints per request, one JSON object a
// line, for the demo to narrate.
type clientLine struct {
	Seq    int    `json:"seq"`
	Status int    `json:"status"`
	Route  string `json:"route,omitempty"`
	Text   string `json:"text,omitempty"`
	Err    string `json:"err,omitempty"`
}

// runClient sends one chat completion to url every -every until ctx ends
// (or its parent dies: the demo starts it with a death signal) and prints
// a line per request: its status, the node that answered (the
// X-Nodeld-Route header) and the answer's text.
func runClient(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	url := fs.String("url", "", "base URL of the role port")
	every := fs.Duration("every", 500*time.Millisecond, "time between requests")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !strings.HasPrefix(*url, "http://127.") || *every <= 0 {
		return errors.New("client: -url must be a loopback http URL, -every positive")
	}
	// The demo starts the client with the nodes: wait for c's role port
	// to listen, so the first line is an answer, not a refused connection.
	if err := waitListening(ctx, strings.TrimPrefix(*url, "http://"), 30*time.Second); err != nil {
		return err
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	tick := time.NewTicker(*every)
	defer tick.Stop()
	enc := json.NewEncoder(out)
	for seq := 1; ; seq++ {
		l := clientLine{Seq: seq}
		l.Status, l.Route, l.Text, l.Err = ask(ctx, hc, *url, seq)
		if ctx.Err() != nil {
			return nil
		}
		if err := enc.Encode(l); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// ask sends one request and returns the status, route, the answer's text
// (or the body of an error answer) and a transport error.
func ask(ctx context.Context, hc *http.Client, url string, seq int) (int, string, string, string) {
	body := fmt.Sprintf(`{"messages":[{"role":"user","content":"request %d"}]}`, seq)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return 0, "", "", err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := hc.Do(req)
	if err != nil {
		return 0, "", "", err.Error()
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	if err != nil {
		return res.StatusCode, res.Header.Get("X-Nodeld-Route"), "", err.Error()
	}
	text := strings.TrimSpace(string(b))
	var ok struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	var bad struct {
		Error struct {
			Message string `json:"message"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	switch {
	case res.StatusCode == http.StatusOK && json.Unmarshal(b, &ok) == nil && len(ok.Choices) > 0:
		text = fmt.Sprintf("%q", ok.Choices[0].Message.Content)
	case res.StatusCode != http.StatusOK && json.Unmarshal(b, &bad) == nil && bad.Error.Message != "":
		text = bad.Error.Code + ": " + bad.Error.Message
	case len(text) > 120:
		text = text[:120] + "..."
	}
	return res.StatusCode, res.Header.Get("X-Nodeld-Route"), text, ""
}

// parseAnswer decodes one line of the client.
func parseAnswer(line string) (*answer, bool) {
	var l clientLine
	if json.Unmarshal([]byte(line), &l) != nil || l.Seq == 0 {
		return nil, false
	}
	return &answer{at: time.Now(), seq: l.Seq, status: l.Status, route: l.Route, text: l.Text, err: l.Err}, true
}

// waitListening dials addr until it accepts a connection, ctx ends or
// limit passes.
func waitListening(ctx context.Context, addr string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn.Close()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("client: %s not listening after %s: %w", addr, limit, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
