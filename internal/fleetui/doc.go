// Package fleetui is the fleet page served on the admin port: /ui/ (the
// page, rendered on the server by html/template), /ui/events (server-sent
// events: each section's HTML when it changed, the node section at least
// every second), /ui/data (the same data as JSON), /ui/decisions/{id} (a
// decision explained, every candidate with its score or rejections) and
// /ui/logs/{id} (an instance's last output, as text). It shows this node,
// the controller's fleet when this node runs one, the recent requests
// (internal/activity) and the instances placed here. It offers no action.
//
// # Invariants
//
//   - Every asset is embedded (go:embed): the page makes no request off
//     its own origin, and every answer carries ContentSecurityPolicy
//     (default-src 'self', no inline script or style).
//   - Data reaches the page only through html/template (escaped) or as
//     text (textContent); the script never builds HTML from data.
//   - Everything shown is bounded: the operator's FleetDoc caps its
//     lists, the activity table shows MaxActivityRows, logs MaxLogBytes
//     per stream, and at most MaxStreams event streams run at once.
//   - The read path is the operator's (operator.Router, the /v1/status
//     document): nothing here reads a component directly.
//
// # Concurrency
//
// UI is safe for concurrent use and starts no goroutine; each event
// stream runs on its request's goroutine and ends when the request's
// context does (the client left, or the admin server shut down).
package fleetui
