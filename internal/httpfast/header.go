package httpfast

import "net/http"

// Value is h.Get(key) for a key already in canonical form (a constant such
// as "Content-Type"), without Get's canonicalising of the key at every
// call: a few per request on each node. Every header map this package and
// its callers build holds canonical names, as net/http's do.
func Value(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}
