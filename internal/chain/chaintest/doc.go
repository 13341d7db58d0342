// Package chaintest gives the tests of the packages that chain records a
// remote party can trigger a real chain file, in the test's temporary
// directory, with the daemon's chain.Recorder on it, both on a clock that
// only the test moves: a flood test sends real traffic, moves the clock
// across windows (Advance, Flush) and then reads back, verified, what the
// chain holds (Entries, Tally), instead of sleeping through real minutes.
//
// Recorded.Record is the Recorder's Record that also counts the events it
// took, by kind, so a test can wait until every event of a flood has been
// handled (chained or counted) before it looks. With Step set, each event
// moves the clock by Step, which plays a steady repeat (one refusal every
// 20 s) in no time.
//
// Only tests may import this package. It starts no goroutines; a
// Recorded is safe for concurrent use and is closed by the test's cleanup.
package chaintest
