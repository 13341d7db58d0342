// Package usage reads what an OpenAI answer reports about itself and keeps
// the medians of recent samples: Tail keeps the end of a response (pooled,
// a copy per write and no parsing), CompletionTokens finds the final usage
// report's completion token count in it, Rate turns that count into a
// generation speed, and Ring holds the last Window
// values of a metric and gives their median. The proxy decides what to
// measure and when; this package only keeps and reads bytes and numbers.
//
// # Invariants
//
//   - Memory is fixed: a Ring holds at most Window values, a Tail at most
//     TailBytes bytes, whatever is written to them.
//   - CompletionTokens reads untrusted bytes: it accepts only a
//     non-negative integer of at most 9 digits after the last
//     "completion_tokens" key and followed by something else, and says
//     false otherwise; it never panics.
//   - Tail.Bytes returns exactly the last TailBytes bytes written (all of
//     them when fewer), oldest first.
//
// # Concurrency
//
// Ring and Tail are not safe for concurrent use: their owner (the proxy's
// per-role recorder under its mutex, the one handler writing a response)
// serializes calls. GetTail and PutTail are safe for concurrent use (a
// sync.Pool). CompletionTokens and Rate are pure functions.
package usage
