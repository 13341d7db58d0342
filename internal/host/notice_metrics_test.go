package host

import (
	"crypto/ed25519"
	"crypto/rand"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nodeld/nodeld/internal/pkg"
)

// Every received notice is counted by result: applied, stale (a repeat),
// refused (not from a controller).
func TestNoticeResultsCounted(t *testing.T) {
	c := newCluster(t, clusterOpts{noRun: true})
	sign := func(key ed25519.PrivateKey, seq uint64) []byte {
		t.Helper()
		raw, err := pkg.SignNotice(key, pkg.Notice{Seq: seq, IssuedAt: time.Now(), Action: pkg.NoticeRevoke,
			Subject: pkg.Subject{Kind: pkg.SubjectPackage, Value: "counted", Reason: "test"}})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	own := sign(c.h.self.PrivateKey(), 1)
	if applied, err := c.h.notes.apply(own, ""); !applied || err != nil {
		t.Fatalf("own notice: %v, %v", applied, err)
	}
	if applied, err := c.h.notes.apply(own, "n-0123456789abcdef"); applied || err != nil {
		t.Fatalf("repeat: %v, %v; want ignored", applied, err)
	}
	_, stranger, _ := ed25519.GenerateKey(rand.Reader)
	if applied, err := c.h.notes.apply(sign(stranger, 1), "n-0123456789abcdef"); applied || err == nil {
		t.Fatalf("stranger's notice: %v, %v; want refused", applied, err)
	}
	for result, want := range map[string]float64{noticeApplied: 1, noticeStale: 1, noticeRefused: 1, noticeError: 0} {
		if got := testutil.ToFloat64(c.h.met.notices.WithLabelValues(result)); got != want {
			t.Errorf("notices{result=%q} = %v, want %v", result, got, want)
		}
	}
}
