package chain

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestVerifyValid(t *testing.T) {
	key := testKey(1)
	for _, n := range []int{0, 1, 5, 100} {
		data := buildChain(t, key, n)
		for _, pub := range []ed25519.PublicKey{nil, pubOf(key)} {
			res, err := Verify(bytes.NewReader(data), pub)
			if err != nil {
				t.Fatalf("n=%d pub=%v: %v", n, pub != nil, err)
			}
			lines := splitLines(data)
			want := VerifyResult{Entries: uint64(n + 1), Head: mustParse(t, lines[len(lines)-1]), PublicKey: pubOf(key)}
			if diff := cmp.Diff(want, res); diff != "" {
				t.Errorf("n=%d: result (-want +got):\n%s", n, diff)
			}
		}
	}
}

// TestVerifyTampered checks that each kind of damage is reported with the
// right reason at the first bad index. The chain has lines 0 (genesis) to 5.
func TestVerifyTampered(t *testing.T) {
	key, other := testKey(1), testKey(2)
	base := buildChain(t, key, 5)

	// edit returns a copy of the lines with f applied.
	edit := func(f func(lines [][]byte) [][]byte) []byte {
		lines := splitLines(bytes.Clone(base))
		for i := range lines {
			lines[i] = bytes.Clone(lines[i])
		}
		return joinLines(f(lines))
	}
	resealAt := func(i int, k ed25519.PrivateKey, f func(e *Entry)) []byte {
		return edit(func(lines [][]byte) [][]byte {
			e := mustParse(t, lines[i])
			f(&e)
			lines[i] = reseal(e, k)
			return lines
		})
	}

	tests := []struct {
		name       string
		give       []byte
		pub        ed25519.PublicKey
		wantIndex  uint64
		wantReason Reason
	}{
		{
			name: "edited payload",
			give: edit(func(l [][]byte) [][]byte {
				l[2] = bytes.Replace(l[2], []byte(`{"n":2}`), []byte(`{"n":9}`), 1)
				return l
			}),
			wantIndex: 2, wantReason: ReasonBadHash,
		},
		{
			name: "edited hash",
			give: edit(func(l [][]byte) [][]byte {
				e := mustParse(t, l[2])
				l[2] = bytes.Replace(l[2], []byte(e.Hash), []byte(strings.Repeat("ab", 32)), 1)
				return l
			}),
			wantIndex: 2, wantReason: ReasonBadHash,
		},
		{
			name:      "deleted entry",
			give:      edit(func(l [][]byte) [][]byte { return append(l[:3], l[4:]...) }),
			wantIndex: 3, wantReason: ReasonSequenceGap,
		},
		{
			name: "swapped entries",
			give: edit(func(l [][]byte) [][]byte {
				l[2], l[3] = l[3], l[2]
				return l
			}),
			wantIndex: 2, wantReason: ReasonSequenceGap,
		},
		{
			name:      "dropped genesis",
			give:      edit(func(l [][]byte) [][]byte { return l[1:] }),
			wantIndex: 0, wantReason: ReasonSequenceGap,
		},
		{
			name:      "truncated mid-line",
			give:      base[:len(base)-40],
			wantIndex: 5, wantReason: ReasonTorn,
		},
		{
			name:      "last newline missing",
			give:      base[:len(base)-1],
			wantIndex: 5, wantReason: ReasonTorn,
		},
		{
			name: "whole chain re-signed by another key",
			give: edit(func(l [][]byte) [][]byte {
				return splitLines(buildChain(t, other, 5))
			}),
			pub:       pubOf(key),
			wantIndex: 0, wantReason: ReasonWrongKey,
		},
		{
			name:      "one entry signed by another key",
			give:      resealAt(3, other, func(*Entry) {}),
			wantIndex: 3, wantReason: ReasonBadSignature,
		},
		{
			name: "signature digit changed",
			give: edit(func(l [][]byte) [][]byte {
				i := bytes.LastIndex(l[4], []byte(`"}`)) - 1 // last sig digit
				if l[4][i] == '0' {
					l[4][i] = '1'
				} else {
					l[4][i] = '0'
				}
				return l
			}),
			wantIndex: 4, wantReason: ReasonBadSignature,
		},
		{
			name: "bad link",
			give: resealAt(3, key, func(e *Entry) {
				e.Prev = mustParse(t, splitLines(base)[1]).Hash
			}),
			wantIndex: 3, wantReason: ReasonBadLink,
		},
		{
			name:      "genesis prev not zero",
			give:      resealAt(0, key, func(e *Entry) { e.Prev = strings.Repeat("1", 64) }),
			wantIndex: 0, wantReason: ReasonBadLink,
		},
		{
			name:      "sequence gap",
			give:      resealAt(4, key, func(e *Entry) { e.Seq = 7 }),
			wantIndex: 4, wantReason: ReasonSequenceGap,
		},
		{
			name:      "second genesis",
			give:      resealAt(2, key, func(e *Entry) { e.Kind = GenesisKind }),
			wantIndex: 2, wantReason: ReasonMalformed,
		},
		{
			name:      "first entry not a genesis",
			give:      resealAt(0, key, func(e *Entry) { e.Kind = "test.event" }),
			wantIndex: 0, wantReason: ReasonMalformed,
		},
		{
			name:      "genesis key not hex",
			give:      resealAt(0, key, func(e *Entry) { e.Payload = []byte(`{"public_key":"xyz"}`) }),
			wantIndex: 0, wantReason: ReasonMalformed,
		},
		{
			name: "garbage line",
			give: edit(func(l [][]byte) [][]byte {
				l[1] = []byte("not json")
				return l
			}),
			wantIndex: 1, wantReason: ReasonMalformed,
		},
		{
			name: "blank line",
			give: edit(func(l [][]byte) [][]byte {
				return append(l[:2], append([][]byte{{}}, l[2:]...)...)
			}),
			wantIndex: 2, wantReason: ReasonMalformed,
		},
		{
			name: "not canonical: extra space",
			give: edit(func(l [][]byte) [][]byte {
				l[3] = bytes.Replace(l[3], []byte(`"seq":`), []byte(`"seq": `), 1)
				return l
			}),
			wantIndex: 3, wantReason: ReasonMalformed,
		},
		{
			name: "not canonical: duplicate payload key",
			give: edit(func(l [][]byte) [][]byte {
				l[3] = bytes.Replace(l[3], []byte(`,"prev":`), []byte(`,"payload":{"n":1},"prev":`), 1)
				return l
			}),
			wantIndex: 3, wantReason: ReasonMalformed,
		},
		{
			name:      "payload not compact",
			give:      resealAt(3, key, func(e *Entry) { e.Payload = []byte(`{"n": 3}`) }),
			wantIndex: 3, wantReason: ReasonMalformed,
		},
		{
			name:      "time not UTC",
			give:      resealAt(3, key, func(e *Entry) { e.Time = "2025-03-01T13:00:00+01:00" }),
			wantIndex: 3, wantReason: ReasonMalformed,
		},
		{
			name: "over-long line",
			give: edit(func(l [][]byte) [][]byte {
				return append(l[:2], bytes.Repeat([]byte("x"), MaxEntryBytes+10))
			}),
			wantIndex: 2, wantReason: ReasonMalformed,
		},
		{
			name:      "empty",
			give:      nil,
			wantIndex: 0, wantReason: ReasonMalformed,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Verify(bytes.NewReader(tt.give), tt.pub)
			var ve *VerifyError
			if !errors.As(err, &ve) {
				t.Fatalf("Verify = %v, want a *VerifyError", err)
			}
			if !errors.Is(err, ErrBroken) {
				t.Errorf("errors.Is(%v, ErrBroken) = false", err)
			}
			want := [3]any{tt.wantIndex, tt.wantIndex + 1, tt.wantReason}
			got := [3]any{ve.Index, ve.Seq, ve.Reason}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("index, seq, reason (-want +got):\n%s\nerror: %v", diff, err)
			}
			if !strings.Contains(err.Error(), tt.wantReason.String()) {
				t.Errorf("error %q does not name the reason %q", err, tt.wantReason)
			}
		})
	}
}

// TestVerifyOtherKeyWithoutExpectation shows that without an expected key
// the genesis decides: a chain re-signed by another key verifies, and its
// result names that key. Callers that know the key must pass it.
func TestVerifyOtherKeyWithoutExpectation(t *testing.T) {
	other := testKey(2)
	res, err := Verify(bytes.NewReader(buildChain(t, other, 3)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.PublicKey.Equal(pubOf(other)) {
		t.Errorf("PublicKey = %x, want %x", res.PublicKey, pubOf(other))
	}
}

func TestVerifyRejectsBadExpectedKey(t *testing.T) {
	_, err := Verify(bytes.NewReader(buildChain(t, testKey(1), 1)), ed25519.PublicKey{1, 2, 3})
	if err == nil || errors.Is(err, ErrBroken) {
		t.Fatalf("Verify with a 3-byte key = %v, want a non-chain error", err)
	}
}

// TestVerifyLongLine checks that lines longer than the read buffer (but
// within MaxEntryBytes) verify.
func TestVerifyLongLine(t *testing.T) {
	key := testKey(1)
	clk := newFakeClock()
	c := &Chain{key: key, now: clk.Now}
	g := c.seal(GenesisSource, GenesisKind, []byte(`{"public_key":"`+hex.EncodeToString(pubOf(key))+`"}`), Entry{}, clk.Now())
	big := `{"blob":"` + strings.Repeat("a", 3*readBufferBytes) + `"}`
	e := c.seal("test", "test.big", []byte(big), g, clk.Now())
	data := appendLine(appendLine(nil, &g), &e)
	res, err := Verify(bytes.NewReader(data), pubOf(key))
	if err != nil {
		t.Fatal(err)
	}
	if res.Entries != 2 || string(res.Head.Payload) != big {
		t.Errorf("Verify = %d entries, payload of %d bytes; want 2, %d", res.Entries, len(res.Head.Payload), len(big))
	}
}

// TestHashEncoding pins the canonical hash input described in the package
// doc, built here independently of hashEntry.
func TestHashEncoding(t *testing.T) {
	e := Entry{Seq: 7, Time: "2025-03-01T12:00:00.5Z", Source: "nodeld", Kind: "node.start", Payload: []byte(`{"a":1}`), Prev: zeroHash}
	var in []byte
	in = append(in, "nodeld.chain.entry.v1\x00"...)
	in = binary.BigEndian.AppendUint64(in, 7)
	for _, f := range []string{e.Time, e.Source, e.Kind, string(e.Payload), e.Prev} {
		in = binary.BigEndian.AppendUint32(in, uint32(len(f)))
		in = append(in, f...)
	}
	want := sha256.Sum256(in)
	if got := hashEntry(&e); got != want {
		t.Errorf("hashEntry = %x, want %x", got, want)
	}
}

// TestGenesisGolden pins the on-disk form of a genesis line: a change here
// breaks every existing chain file.
func TestGenesisGolden(t *testing.T) {
	key := testKey(1)
	c := &Chain{key: key}
	payload := []byte(`{"public_key":"` + hex.EncodeToString(pubOf(key)) + `"}`)
	g := c.seal(GenesisSource, GenesisKind, payload, Entry{}, newFakeClock().Now())
	got := string(appendLine(nil, &g))
	const want = `{"seq":1,"time":"2025-03-01T12:00:00.124456789Z","source":"chain","kind":"chain.genesis","payload":{"public_key":"8a88e3dd7409f195fd52db2d3cba5d72ca6709bf1d94121bf3748801b40f6f5c"},"prev":"0000000000000000000000000000000000000000000000000000000000000000","hash":"ed12d91f79ca16951fba82a7296724965d13636ae83f0f35eb603d836fb5a043","sig":"0ca9fb2720a7322c94561e839942cf73ba527688a7e20ac09371c1e6ab79bcc018bc977791693e2e2c0409dd883ee82cd7650384cf5033f8fb29ef4dce0bd60e"}` + "\n"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("genesis line (-want +got):\n%s", diff)
	}
}
