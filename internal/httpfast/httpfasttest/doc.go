// Package httpfasttest is a raw HTTP/1.1 upstream for tests and
// benchmarks that count what the code in front of it allocates: it reads
// each request's head and Content-Length body from a kept connection and
// answers with fixed bytes, allocating nothing per request, so that an
// allocation counted is the caller's. ReadHead is the same head reader,
// for a raw client's side.
//
// Only tests import it; it imports the standard library only.
package httpfasttest
