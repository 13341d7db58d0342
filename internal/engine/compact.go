package engine

import "strings"

// Compact returns Profiles equal to those given (nil for nil), laid out
// anew one after the other in memory, in the order given: their
// headers in one array, and their capability symbols, capabilities,
// attributes, list elements and ids each in one array shared by all.
// A decision reads each node's Profile in turn; laid out in the order of
// the nodes, what it reads of one node lies next to what it read of the
// one before, so that memory is read in a few streams the processor can
// fetch ahead, rather than in scattered small blocks, and the collector
// traces a few large blocks rather than a few per node. Decisions over
// compacted Profiles are the same as over those given.
//
// A caller that keeps one Profile per node (see Symbols.Prepare) can
// compact them in the order it gives its nodes to Place, once, and again
// when some of them are prepared anew. The Profiles given are not
// changed; the compacted ones are immutable too, and keep all of the
// arrays alive while any of them is.
func Compact(prs []*Profile) []*Profile {
	var nints, ncaps, nattrs, nelems, nids, nhdr int
	for _, pr := range prs {
		if pr == nil {
			continue
		}
		nhdr++
		nints += len(pr.idSym) + len(pr.idAt)
		ncaps += len(pr.caps)
		nattrs += len(pr.attrs)
		nelems += len(pr.elems)
		nids += len(pr.ids)
	}
	out := make([]*Profile, len(prs))
	hdr := make([]Profile, nhdr)
	ints := make([]int32, 0, nints)
	caps := make([]pcap, 0, ncaps)
	attrs := make([]pattr, 0, nattrs)
	var elems []pval
	if nelems > 0 {
		elems = make([]pval, 0, nelems)
	}
	var ids strings.Builder
	ids.Grow(nids)
	for _, pr := range prs {
		if pr != nil {
			ids.WriteString(pr.ids)
		}
	}
	all := ids.String()
	// Each node's symbols first, then the offsets of its ids: the
	// symbols are read by every decision, the offsets by explanations.
	k, idsAt := 0, 0
	for i, pr := range prs {
		if pr == nil {
			continue
		}
		h := &hdr[k]
		k++
		*h = *pr
		h.idSym = appendClipped(&ints, pr.idSym)
		h.caps = appendClipped(&caps, pr.caps)
		h.attrs = appendClipped(&attrs, pr.attrs)
		if pr.elems != nil {
			h.elems = appendClipped(&elems, pr.elems)
		}
		h.ids = all[idsAt : idsAt+len(pr.ids)]
		idsAt += len(pr.ids)
		out[i] = h
	}
	for i, pr := range prs {
		if pr != nil {
			out[i].idAt = appendClipped(&ints, pr.idAt)
		}
	}
	return out
}

// appendClipped appends src to *buf, which has room for it, and returns
// the copy, its capacity clipped.
func appendClipped[T any](buf *[]T, src []T) []T {
	at := len(*buf)
	*buf = append(*buf, src...)
	return (*buf)[at:len(*buf):len(*buf)]
}
