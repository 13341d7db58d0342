package facts

import (
	"path/filepath"

	"github.com/nodeld/nodeld/internal/seqfile"
)

// SeqFileName is the file in the data directory that holds the highest
// reserved facts seq.
const SeqFileName = "facts.seq"

// ErrSeqExhausted is returned by Next when no seq is left to hand out.
var ErrSeqExhausted = seqfile.ErrExhausted

// SeqStore hands out facts seq values that increase across restarts: a
// seqfile.Counter that durably reserves seqReserveBlock values per write,
// so a crash skips values but never reuses one.
type SeqStore = seqfile.Counter

// OpenSeqStore opens <dataDir>/facts.seq, or starts from zero when it does
// not exist. It writes nothing until the first Next. A file that does not
// hold one decimal number is an error: deleting it restarts seq at 1,
// which peers accept only once the old facts have expired.
func OpenSeqStore(dataDir string) (*SeqStore, error) {
	return seqfile.Open(filepath.Join(dataDir, SeqFileName), seqReserveBlock)
}
