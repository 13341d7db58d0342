// Package host is the workload host: the node side of workload.ctl. It
// serves the eight methods on mesh streams of kind mesh.KindCtl (Register)
// and on the local operator socket (ServeLocal), fetches placed packages
// from the caller over mesh.KindArtifact streams, verifies them against
// this node's trust anchors and revocations, runs them through
// internal/runner, supervises them, and registers inference roles in the
// placement table while their instance is healthy.
//
// # place and load
//
// The manifest and its signatures travel in the signed request, so the
// controller's decision authorises exactly the files that manifest lists.
// The host verifies them (pkg.VerifyBytes: a trust anchor signed, nothing
// revoked; a revoked subject is refused governance, anything else verify),
// admits the variant (OS, arch, runtime present in the node's facts,
// memory against free memory, package size against MaxPackageBytes and
// free disk), derives the deterministic instance id (ctl.InstanceID), marks
// the decision in flight, fetches each listed file (ctl/artifact.go) into
// <data_dir>/packages/.partial/<decision>/, moves the finished directory to
// <data_dir>/packages/<id>-<version>-<16 hex of manifest hash>/ and runs
// pkg.VerifyDir on it. A directory already there that still verifies is
// reused without a fetch: instances of the same manifest (other variants
// or configs) share it. It is removed once nothing uses it (no listed
// instance, no place in flight): by the unload or revocation teardown of
// its last instance, and by a place that fails. Only a directory directly
// under packages/ is removed, never a hidden one or a symbolic link, and
// through an os.Root; a place that begins meanwhile waits for the removal. The instance is listed (loaded) before the
// decision leaves the in-flight set, so a lost answer is always visible to
// a status listing. For place with start, a failed start is rolled back
// (unloaded); if that fails too the instance stays listed (failed, reason
// rollback). A start verb that fails leaves the instance failed (reason
// start_failed, or not_loopback), never stopped: stopped is an
// operator's doing, failed asks for a start again.
//
// # States and reasons
//
// Each instance's state (ctl.InstanceState) carries since, when it was
// entered (the host's clock, Deps.Now), and, for unhealthy, restarting
// and failed, a stable reason code (ctl.Reason*) mapped from the
// supervisor's cause (runner.Supervisor.Cause): restart_budget,
// not_loopback, start_failed, health, exited. The place answer carries
// neither (it must decode on older controllers); the status listing and
// Status (/v1/status) carry both. An ollama package drives the daemon at
// runner.DefaultOllamaURL.
//
// The wire contract a controller reads from hosts is ctl's, not this
// package's: the lifecycle states an instance is reported in
// (ctl.StateLoaded ...), the reasons of a departed instance
// (ctl.DepartedUnloaded, ctl.DepartedRevoked), the derivation of instance
// ids from package, variant and config (ctl.InstanceID, ctl.InstanceConfig)
// and the workload-host advertisement (Advertisement: ctl.HostAdvertName
// with ctl.HostMetadata), so a controller predicts and reads them
// without importing the host.
//
// # Revocation notices
//
// Register also serves mesh.KindNotice: one NoticeFrame holding a signed
// pkg notice (at most pkg.MaxNoticeBytes), verified against this node's
// key and its controllers, then Revocations.ApplyNotice. A notice applied
// is kept in the replay log <data_dir>/notices.log (NoticesFile: base64
// lines, mode 0600, rewritten atomically; one notice per subject, the
// newest, so an unrevoke replaces the revoke; at most MaxNoticeLog),
// chained host.notice.applied and forwarded to every other linked peer
// (NoticeForwardConcurrency at once). A stale or duplicate notice is
// ignored and not forwarded, which ends gossip loops; one that does not
// verify is recorded host.notice.refused through Deps.Recorder (see
// Invariants). SubmitNotice is
// the local operator's entry (dispatch's revoke --notify). ReplayNotices,
// wired to mesh.Deps.OnLinkUp, sends the log to a peer whose link comes
// up, NoticeReplayPace apart, at most one complete replay per
// NoticeReplayCooldown, until its link goes (a replay cut short does not
// count). New loads the log and applies every notice that still
// verifies, dropping the rest.
//
// # Invariants
//
//   - Nothing is written outside the partial directory but the listed
//     paths (opened through an os.Root), every piece is hashed before it
//     is written, and the whole file's size and SHA-256 must be the
//     manifest's.
//   - A revoked subject refuses place and start, and forces the teardown
//     of running instances that carry it (Run's watcher: on every change
//     of the list, every RevocationSweep, and TeardownRetry after a failed
//     teardown). Teardowns are chained and idempotent.
//   - Every step is chained with source AuditSource (the Kind* constants),
//     never request bodies or environment values. A controller's refused
//     mutation (place, load, start, stop, unload) is always chained: it
//     names the decision. The refusals a caller can repeat at will (of an
//     unauthenticated call, of describe, status and logs, of a notice
//     that does not verify) go through Deps.Recorder, the daemon's shared
//     rate-limited recorder, keyed by the peer the stream authenticated
//     (this node for the local operator), the kind and the refusal code
//     (ctl.Code, pkg.VerifyError.Code): it chains the first of a key per
//     period and counts the rest in a summary entry. place begins only once
//     host.place.begin is written, and start only once host.start.begin
//     is (fail closed: refused runtime otherwise). stop, unload and
//     revocation teardowns reduce risk, so they proceed when their record
//     cannot be written and count it in nodeld_host_audit_failures_total.
//   - An inference instance holds its own registration of its role in the
//     table (table.OriginPlaced) while its supervisor reports it running,
//     and releases only that one: with two instances of a role, stopping
//     either leaves the other serving, and an adopted server of the role
//     going down never withdraws a placed instance.
//   - A stop or unload withdraws the registration before it touches the
//     process: new requests for the role go to the registration standing
//     by (another placed instance, an adopted server) or a peer at once;
//     the requests resolved to the instance before (the forwarders' holds,
//     table.ResolveHeld) get up to the stop's grace to finish
//     (table.LocalSlot.Drained; the status detail says so meanwhile, and a
//     grace that runs out is logged and counted in
//     nodeld_host_stop_drain_timeouts_total); only then is the process
//     stopped, with the same grace. No request meets a closed port. A
//     revocation teardown withdraws first too but does not wait: the
//     revocation is the authority.
//   - Every admitted peer may call describe; status and logs (instance
//     lists and their output) only this node, its controllers and its
//     readers (Config.ReaderKeys, ReaderPeers); the mutating methods only
//     its controllers. Anyone else is refused unauthorized by the verifier
//     (before the nonce is burned), chained as an unauthenticated refusal.
//     A disabled host (Config.Enabled false) applies the same rule and
//     refuses the mutating methods to its controllers too (unauthorized).
//
// # Concurrency
//
// New starts nothing. Register installs the ctl handler; calls are served
// on the mesh's stream goroutines (or the ServeLocal caller's). Run owns
// the revocation watcher and one supervisor goroutine per started
// instance (runner.Supervisor.Run); when ctx ends it stops every
// instance, waits for every supervisor, releases their registrations and
// returns nil. Places need Run to be running to start instances. h.mu
// guards the host's maps and is never held across I/O; each instance's
// opMu serialises its verbs so a process is never started and stopped at
// once. notes.mu serialises applying a notice with its log rewrite (held
// across that file write, never under h.mu). Notice forwarding and replay
// run on the mesh's goroutines (stream handlers, OnLinkUp).
package host
