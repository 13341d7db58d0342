package chain

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzVerify feeds arbitrary bytes to Verify: it must not panic, and what
// it accepts must be a consistent chain.
func FuzzVerify(f *testing.F) {
	key := testKey(1)
	valid := buildChain(f, key, 3)
	f.Add(valid)
	f.Add(valid[:len(valid)-17])
	f.Add(bytes.Replace(valid, []byte(`"n":2`), []byte(`"n":3`), 1))
	f.Add([]byte{})
	f.Add([]byte("\n"))
	f.Add([]byte("{}\n"))
	f.Add([]byte(`{"seq":1,"time":"x","source":"chain","kind":"chain.genesis","payload":{},"prev":"","hash":"","sig":""}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, pub := range [][]byte{nil, pubOf(key)} {
			res, err := Verify(bytes.NewReader(data), pub)
			if err != nil {
				var ve *VerifyError
				if !errors.As(err, &ve) || ve.Seq != ve.Index+1 || ve.Reason < ReasonMalformed || ve.Reason > ReasonTorn {
					t.Fatalf("Verify error %v is not a well-formed *VerifyError", err)
				}
				if res.Entries != ve.Index {
					t.Fatalf("result has %d entries before a break at index %d", res.Entries, ve.Index)
				}
				continue
			}
			if res.Entries == 0 || res.Head.Seq != res.Entries || len(res.PublicKey) != 32 {
				t.Fatalf("accepted chain is inconsistent: %+v", res)
			}
			if pub != nil && !res.PublicKey.Equal(pubOf(key)) {
				t.Fatalf("accepted a chain under another key")
			}
		}
	})
}
