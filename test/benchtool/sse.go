package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// streamTimeout bounds one measured stream.
const streamTimeout = 2 * time.Minute

var sentKey = []byte(`"sent_ns":`)

// ssePath is one named URL whose streams are measured.
type ssePath struct {
	name, url string
	// Per round: the largest added gap, and every added gap and chunk
	// delay seen (nanoseconds).
	roundMax []float64
	gaps     []float64
	delays   []float64
}

// runSSE streams completions through each path, interleaved by round, and
// prints per path the gaps between chunks the path adds to the upstream's:
// for chunk i, (received_i - received_i-1) - (sent_i - sent_i-1), where
// sent is the upstream's clock when it wrote the chunk. The direct path's
// figure is the measurement's own noise (client and kernel).
func runSSE(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("sse", flag.ContinueOnError)
	rounds := fs.Int("rounds", 3, "interleaved rounds")
	streams := fs.Int("streams", 5, "streams per path and round, one after the other")
	chunks := fs.Int("chunks", 200, "chunks per stream (sent as max_tokens)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 || *rounds < 1 || *streams < 1 || *chunks < 2 {
		return errors.New("usage: benchtool sse [-rounds R] [-streams S] [-chunks C] NAME=URL ...")
	}
	var paths []*ssePath
	for _, a := range fs.Args() {
		name, url, ok := strings.Cut(a, "=")
		if !ok || name == "" || !strings.HasPrefix(url, "http://127.0.0.1:") {
			return fmt.Errorf("sse: %q is not NAME=http://127.0.0.1:PORT", a)
		}
		paths = append(paths, &ssePath{name: name, url: strings.TrimSuffix(url, "/")})
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}
	defer client.CloseIdleConnections()
	body := fmt.Sprintf(`{"model":"bench","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"Count."}]}`, *chunks)
	for round := range *rounds {
		for i := range paths {
			p := paths[(i+round)%len(paths)] // rotate the order each round
			worst := 0.0
			for range *streams {
				gaps, delays, err := measureStream(ctx, client, p.url, body, *chunks)
				if err != nil {
					return fmt.Errorf("sse %s: %w", p.name, err)
				}
				worst = max(worst, slices.Max(gaps))
				p.gaps = append(p.gaps, gaps...)
				p.delays = append(p.delays, delays...)
			}
			p.roundMax = append(p.roundMax, worst)
		}
	}
	fmt.Fprintf(out, "| path | chunk delay p50 | added gap p99 | largest added gap, median of rounds | largest added gap, all rounds |\n")
	fmt.Fprintln(out, "|---|---|---|---|---|")
	for _, p := range paths {
		fmt.Fprintf(out, "| %s | %.0f µs | %.0f µs | %.0f µs | %.0f µs |\n", p.name,
			median(p.delays)/1e3, quantile(p.gaps, 0.99)/1e3, median(p.roundMax)/1e3, slices.Max(p.roundMax)/1e3)
	}
	fmt.Fprintf(out, "\n%d rounds x %d streams x %d chunks per path; chunk delay is receipt minus the upstream's write time.\n", *rounds, *streams, *chunks)
	return nil
}

func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// measureStream reads one streamed completion and returns the added gap
// before every chunk but the first, and every chunk's delay.
func measureStream(ctx context.Context, client *http.Client, url, body string, chunks int) (gaps, delays []float64, err error) {
	ctx, cancel := context.WithTimeout(ctx, streamTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("status %d", res.StatusCode)
	}
	var prevSent, prevRecv int64
	br := bufio.NewReaderSize(res.Body, 64<<10)
	n := 0
	for {
		line, err := br.ReadSlice('\n')
		recv := time.Now().UnixNano()
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, nil, err
		}
		i := bytes.Index(line, sentKey)
		if i < 0 {
			continue
		}
		rest := line[i+len(sentKey):]
		end := 0
		for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
			end++
		}
		sent, err := strconv.ParseInt(string(rest[:end]), 10, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("bad sent_ns in %q", line)
		}
		delays = append(delays, float64(recv-sent))
		if n > 0 {
			gaps = append(gaps, float64((recv-prevRecv)-(sent-prevSent)))
		}
		prevSent, prevRecv = sent, recv
		n++
	}
	if n != chunks {
		return nil, nil, fmt.Errorf("got %d chunks, want %d", n, chunks)
	}
	return gaps, delays, nil
}
