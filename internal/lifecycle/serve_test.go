package lifecycle

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/chain"
)

// kinds is a chain that keeps the kinds and reasons appended.
type kinds struct {
	got  []string
	fail string // the kind it refuses
}

func (k *kinds) Append(_, kind string, payload any) (chain.Entry, error) {
	if kind == k.fail {
		return chain.Entry{}, errors.New("disk full")
	}
	if r, ok := payload.(map[string]any)["reason"]; ok {
		kind += " " + r.(string)
	}
	k.got = append(k.got, kind)
	return chain.Entry{}, nil
}

// TestServeChainsStartAndStop: node.start before run, node.stop with the
// reason after (the signal, or run's error, which Serve returns); a
// SIGHUP reaches run's hup and does not stop it; a chain that refuses
// node.start stops the start, one that refuses node.stop is the error of
// a clean stop.
func TestServeChainsStartAndStop(t *testing.T) {
	ch := &kinds{}
	err := Serve(t.Context(), ch, zap.NewNop(), map[string]any{}, func(ctx context.Context, hup <-chan os.Signal) error {
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		<-hup
		if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		<-ctx.Done()
		return nil
	})
	if err != nil || !slices.Equal(ch.got, []string{"node.start", "node.stop signal"}) {
		t.Fatalf("Serve = %v, chained %q", err, ch.got)
	}
	boom := errors.New("mesh listener gone")
	ch = &kinds{}
	err = Serve(t.Context(), ch, zap.NewNop(), nil, func(context.Context, <-chan os.Signal) error { return boom })
	if !errors.Is(err, boom) || !slices.Equal(ch.got, []string{"node.start", "node.stop mesh listener gone"}) {
		t.Fatalf("Serve = %v, chained %q", err, ch.got)
	}
	ran := false
	err = Serve(t.Context(), &kinds{fail: "node.start"}, zap.NewNop(), nil, func(context.Context, <-chan os.Signal) error { ran = true; return nil })
	if err == nil || ran || !strings.Contains(err.Error(), "chain node.start") {
		t.Fatalf("refused node.start: Serve = %v, ran %v", err, ran)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err = Serve(ctx, &kinds{fail: "node.stop"}, zap.NewNop(), nil, func(ctx context.Context, _ <-chan os.Signal) error { <-ctx.Done(); return nil })
	if err == nil || !strings.Contains(err.Error(), "chain node.stop") {
		t.Fatalf("refused node.stop: Serve = %v", err)
	}
}
