package activity

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// clock is a fake clock the tests advance.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                   { return &clock{t: time.Unix(1_800_000_000, 0)} }
func roles(rs []Request) (out []string) {
	for _, r := range rs {
		out = append(out, r.Role)
	}
	return out
}

func TestFullRingOverwritesOldest(t *testing.T) {
	l := New(3, newClock().now)
	for _, r := range []string{"a", "b", "c", "d", "e"} {
		l.Add(Request{Role: r})
	}
	if diff := cmp.Diff([]string{"e", "d", "c"}, roles(l.Recent(0))); diff != "" {
		t.Errorf("Recent after 5 adds to a ring of 3 (-want +got):\n%s", diff)
	}
	if got := l.Seq(); got != 5 {
		t.Errorf("Seq = %d, want 5", got)
	}
}

func TestRecent(t *testing.T) {
	tests := []struct {
		name string
		adds []string
		max  int
		want []string
	}{
		{name: "empty", max: 0, want: []string{}},
		{name: "newest first", adds: []string{"a", "b"}, max: 0, want: []string{"b", "a"}},
		{name: "max cuts the oldest", adds: []string{"a", "b", "c"}, max: 2, want: []string{"c", "b"}},
		{name: "max above held", adds: []string{"a"}, max: 10, want: []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := New(4, newClock().now)
			for _, r := range tt.adds {
				l.Add(Request{Role: r})
			}
			got := roles(l.Recent(tt.max))
			if got == nil {
				got = []string{}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewBoundsSize(t *testing.T) {
	for give, want := range map[int]int{-1: DefaultSize, 0: DefaultSize, 7: 7, MaxSize + 1: MaxSize} {
		if got := len(New(give, nil).ring); got != want {
			t.Errorf("New(%d) holds %d, want %d", give, got, want)
		}
	}
}

func TestRatesBucketsPerSecond(t *testing.T) {
	c := newClock()
	l := New(10, c.now)
	l.Add(Request{Tokens: 10})
	l.Add(Request{Tokens: 5})
	c.advance(2 * time.Second)
	l.Add(Request{Tokens: 1})
	rs := l.Rates()
	if len(rs) != ChartSeconds {
		t.Fatalf("Rates has %d seconds, want %d", len(rs), ChartSeconds)
	}
	last := rs[ChartSeconds-1]
	if !last.At.Equal(c.t) || last.Requests != 1 || last.Tokens != 1 {
		t.Errorf("current second = %+v, want 1 request, 1 token at %v", last, c.t)
	}
	if two := rs[ChartSeconds-3]; two.Requests != 2 || two.Tokens != 15 {
		t.Errorf("two seconds ago = %+v, want 2 requests, 15 tokens", two)
	}
	// A bucket older than the chart is not shown again when its slot
	// comes round.
	c.advance(ChartSeconds * time.Second)
	for _, s := range l.Rates() {
		if s.Requests != 0 {
			t.Fatalf("after %d s, %+v still counted", ChartSeconds, s)
		}
	}
	l.Add(Request{Tokens: 3})
	if last := l.Rates()[ChartSeconds-1]; last.Requests != 1 || last.Tokens != 3 {
		t.Errorf("a reused slot = %+v, want only the new request", last)
	}
}

// TestAddEndedCountsInItsEndsSecond: a request added with its end is
// kept as Add keeps it and counted in its end's second, without a read
// of the Log's clock.
func TestAddEndedCountsInItsEndsSecond(t *testing.T) {
	c := newClock()
	reads := 0
	l := New(4, func() time.Time { reads++; return c.now() })
	r := Request{At: c.t.Add(-1500 * time.Millisecond), Role: "chat", Route: RoutePeer, Node: "n", Status: 200, Tokens: 7}
	l.AddEnded(r, c.t.Add(-time.Second))
	if reads != 0 {
		t.Errorf("AddEnded read the clock %d times, want 0", reads)
	}
	if diff := cmp.Diff([]Request{r}, l.Recent(0)); diff != "" {
		t.Errorf("Recent (-want +got):\n%s", diff)
	}
	rs := l.Rates()
	if last, prev := rs[ChartSeconds-1], rs[ChartSeconds-2]; last.Requests != 0 || prev.Requests != 1 || prev.Tokens != 7 {
		t.Errorf("this second %+v, the one before %+v; want the request in the one before", last, prev)
	}
}

func TestAddCutsLongFields(t *testing.T) {
	l := New(1, nil)
	l.Add(Request{Role: strings.Repeat("r", 1000), Node: strings.Repeat("n", 1000)})
	got := l.Recent(1)[0]
	if len(got.Role) != MaxFieldBytes || len(got.Node) != MaxFieldBytes {
		t.Errorf("role %d, node %d bytes, want %d", len(got.Role), len(got.Node), MaxFieldBytes)
	}
}

func TestAddDoesNotAllocate(t *testing.T) {
	l := New(8, nil)
	r := Request{Role: "chat", Route: RoutePeer, Node: "abc", Status: 200}
	if n := testing.AllocsPerRun(100, func() { l.Add(r) }); n != 0 {
		t.Errorf("Add allocates %v times per call, want 0", n)
	}
	end := time.Now()
	if n := testing.AllocsPerRun(100, func() { l.AddEnded(r, end) }); n != 0 {
		t.Errorf("AddEnded allocates %v times per call, want 0", n)
	}
}

func TestConcurrentAddAndRead(t *testing.T) {
	l := New(16, nil)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 500 {
				l.Add(Request{Role: "chat", Tokens: 1})
			}
		})
	}
	wg.Go(func() {
		for range 200 {
			_ = l.Recent(8)
			_ = l.Rates()
		}
	})
	wg.Wait()
	if got := l.Seq(); got != 2000 {
		t.Errorf("Seq = %d, want 2000", got)
	}
	if got := len(l.Recent(0)); got != 16 {
		t.Errorf("held %d, want 16", got)
	}
}

func BenchmarkAdd(b *testing.B) {
	l := New(DefaultSize, nil)
	r := Request{Role: "chat", Route: RouteLocal, Status: 200}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Add(r)
		}
	})
}

// BenchmarkAddEnded is BenchmarkAdd as the proxy adds: with the end it
// read.
func BenchmarkAddEnded(b *testing.B) {
	l := New(DefaultSize, nil)
	r := Request{Role: "chat", Route: RouteLocal, Status: 200}
	end := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.AddEnded(r, end)
		}
	})
}
