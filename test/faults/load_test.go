//go:build faults

package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// The client's two kinds of request: a short completion, and a stream of
// streamWords words (the echo server sends one chunk per word,
// chunkDelay apart).
const (
	streamPrompt = "one two three four five six seven eight"
	// Timeouts of one request: far above what a healthy answer takes
	// (under 10 ms, and a stream under 250 ms), so a request that
	// fails has failed, not timed out early.
	shortTimeout  = 10 * time.Second
	streamTimeout = 20 * time.Second
	// pace is the pause between one worker's requests.
	pace = 20 * time.Millisecond
)

// sample is one request of the client load.
type sample struct {
	node   string // whose role port
	stream bool
	sent   time.Time
	head   time.Time // the response head; zero if none came
	first  time.Time // a stream's first token; zero if none came
	done   time.Time
	code   int
	route  string // X-Nodeld-Route: "local" or the serving node's id
	err    error
	// ok: 200 and the whole, right answer (a stream's every word and its
	// [DONE]).
	ok bool
}

// cut is a response whose head came but whose body did not complete: a
// forward that had begun to answer is never retried (it may have
// streamed), so a dead server cuts it.
func (s sample) cut() bool { return !s.ok && s.code == http.StatusOK && !s.head.IsZero() }

func (s sample) ttft() time.Duration { return s.first.Sub(s.sent) }

// load drives role ports continuously: per target node, short workers
// and stream workers, each sending one request after another.
type load struct {
	mu      sync.Mutex
	samples []sample
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func startLoad(targets []*node, shortWorkers, streamWorkers int) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{cancel: cancel}
	for _, n := range targets {
		for i := range shortWorkers + streamWorkers {
			stream := i >= shortWorkers
			l.wg.Go(func() {
				for seq := 0; ctx.Err() == nil; seq++ {
					s := request(ctx, n, stream, fmt.Sprintf("%s-%d-%d", n.name, i, seq))
					if ctx.Err() != nil && !s.ok {
						return // cut by stop, not by a fault
					}
					l.mu.Lock()
					l.samples = append(l.samples, s)
					l.mu.Unlock()
					select {
					case <-ctx.Done():
					case <-time.After(pace):
					}
				}
			})
		}
	}
	return l
}

// stop ends the load (requests in flight are abandoned and not counted)
// and returns every sample, in order of sending.
func (l *load) stop() []sample {
	l.cancel()
	l.wg.Wait()
	return l.snapshot()
}

func (l *load) snapshot() []sample {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.samples)
	slices.SortFunc(out, func(a, b sample) int { return a.sent.Compare(b.sent) })
	return out
}

// since returns the samples done after t.
func (l *load) since(t time.Time) []sample {
	var out []sample
	for _, s := range l.snapshot() {
		if s.done.After(t) {
			out = append(out, s)
		}
	}
	return out
}

// request sends one request to n's role port and reads the whole answer.
func request(ctx context.Context, n *node, stream bool, tag string) (s sample) {
	s = sample{node: n.name, stream: stream, sent: time.Now()}
	defer func() { s.done = time.Now() }()
	prompt := "short " + tag
	timeout := shortTimeout
	if stream {
		prompt, timeout = streamPrompt, streamTimeout
	}
	body, _ := json.Marshal(map[string]any{
		"stream":   stream,
		"messages": []map[string]string{{"role": "user", "content": prompt}},
	})
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+rolePort+"/v1/chat/completions", strings.NewReader(string(body)))
	if err != nil {
		s.err = err
		return s
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := n.http.Do(req)
	if err != nil {
		s.err = err
		return s
	}
	defer res.Body.Close()
	s.head, s.code, s.route = time.Now(), res.StatusCode, res.Header.Get("X-Nodeld-Route")
	want := "echo: " + prompt
	if !stream {
		b, err := io.ReadAll(res.Body)
		s.err = err
		s.ok = err == nil && s.code == http.StatusOK && strings.Contains(string(b), want)
		return s
	}
	var text strings.Builder
	done := false
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(data), &chunk) != nil || len(chunk.Choices) == 0 {
			continue
		}
		if s.first.IsZero() {
			s.first = time.Now()
		}
		text.WriteString(chunk.Choices[0].Delta.Content)
	}
	s.err = sc.Err()
	s.ok = s.code == http.StatusOK && done && text.String() == want
	return s
}

// tally counts samples.
type tally struct {
	total, ok, cut, failed int
}

func count(samples []sample, keep func(sample) bool) tally {
	var t tally
	for _, s := range samples {
		if keep != nil && !keep(s) {
			continue
		}
		t.total++
		switch {
		case s.ok:
			t.ok++
		case s.cut():
			t.cut++
		default:
			t.failed++
		}
	}
	return t
}

func (t tally) String() string {
	return fmt.Sprintf("%d/%d ok", t.ok, t.total)
}

// durQuantile returns the q-quantile of ds (sorted in place), -1 if empty.
func durQuantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return -1
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// firstFailure describes the first failed sample, "" if none.
func firstFailure(samples []sample) string {
	for _, s := range samples {
		if !s.ok && !s.cut() {
			return fmt.Sprintf("%s request to %s at %s: code %d route %q err %v",
				map[bool]string{true: "stream", false: "short"}[s.stream], s.node, s.sent.Format("15:04:05.000"), s.code, s.route, s.err)
		}
	}
	return ""
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%d ms", d.Round(time.Millisecond).Milliseconds())
}
