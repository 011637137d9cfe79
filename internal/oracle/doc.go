// Package oracle is Ferry's correctness oracle: the harness behind the test
// that is the reason users can trust Ferry never to build the wrong code.
//
// # What it checks
//
// Several agents (each an Agent: a working tree, a way to build it and a way
// to run what the build produced) make random edits to the fixture
// workspace (internal/fixture) round after round, concurrently. After every
// build the harness compares what the agent's build produced with what a cold build of that
// agent's exact tree produces:
//
//   - the output of the app binary (the fixture's marker line, a digest of
//     every source file it is built from, so a stale unit shows);
//   - the output of `cargo test -p app`, whose integration test runs the
//     binary and checks it against the libraries it was compiled with
//     (compared after dropping timings and sorting, since tests run in
//     parallel).
//
// The agent's cargo runs at the worktree's root, or for one build in four in
// a member crate or a directory that is no package (the workspace is found
// above; for Ferry that is the shim's workspace lookup).
//
// A difference, or an agent build that fails where the reference succeeds, is
// a Mismatch: a wrong build. The harness never stops at the first one; the
// Report lists every mismatch with the agent, the round, the build step, every
// edit the agent made so far, the seed, and expected against got.
//
// # The edits
//
// Each round applies one to three edits drawn from every Kind: member sources
// (lib.rs of the chain and diamond crates, app's main.rs, the proc-macro, the
// build script and the other libraries; appended comments and same-size
// rewrites), the build script's watched directory (add, edit and delete a
// file, sometimes in a subdirectory), the content of the symlink's target,
// retargeting the tracked symlink to a new file with other content (a change
// of the link text), a reverted edit (edit a file, build and check, restore the
// base's exact bytes, build and check again), and Cargo.toml changes (a
// [features] table, a version bump, a path dependency between two members that
// keeps the graph acyclic, a table in the workspace manifest). Every edit keeps
// the tree buildable; a reference build that fails is reported as a harness
// error, not as a finding.
//
// The first edit of round r for agent i is the kind at position (r*agents+i)
// of a seeded permutation of all kinds, so every kind is exercised once the
// run has as many agent-rounds as there are kinds; further edits are drawn by
// weight.
//
// An agent only ever retargets the symlink to a freshly written file outside
// the crate that includes it, because two other retargets are missed by plain
// Cargo in any checkout (verified with cargo 1.95, no Ferry involved), and no
// target-dir scheme can be blamed for them: pointing the link at an existing
// older file (Cargo reads a symlinked input's mtime through the link), and
// retargeting a link that points inside the crate (Cargo then records the
// input by its canonical path, and that file did not change). The commit odd
// agents start at (Diverge) does retarget to an existing file: at spawn,
// before any build of the agent, that is Ferry's to get right.
//
// # Reproducing a run
//
// All randomness comes from the seed (Options.Seed): agent i draws its edits
// from its own generator seeded with (seed, i), so the edit sequence of every
// agent is the same on every run with the same seed, agent count and round
// count, whatever the interleaving of the concurrent builds. The tests print
// the seed at the start and with every failure, together with the environment
// to rerun exactly that sequence (FERRY_ORACLE_SEED, FERRY_ORACLE_AGENTS,
// FERRY_ORACLE_ROUNDS).
//
// # The reference build
//
// The reference for an agent is a plain cargo build of a copy of the agent's
// tree (everything but .git and target) in a directory of its own, with its
// own CARGO_TARGET_DIR, outside Ferry. A true cold build after every round
// costs about 6 s on two cores, most of it in the registry crates (syn,
// serde_derive, serde), so instead each agent keeps one reference directory:
// its target dir is seeded once from a template target built cold from the
// fixture (with mtimes kept, so the registry crates are fresh), and every
// round the source copy is deleted and copied again. Copying writes every file
// anew, so every file is newer than every unit in the reference target and
// Cargo rebuilds every workspace member and reruns the build script, while
// reusing the registry crates, which no edit touches: equivalent to a cold
// build for the code under test, at about 2 s a round. As a second, Cargo-free
// oracle, every round also checks the reference's app output against
// fixture.ExpectedMarker of the same tree; a disagreement there is a harness
// error.
//
// # Two kinds of agents
//
// A Ferry agent is spawned with `ferry spawn` from a base built by `ferry
// base`, and built through the cargo shim in its worktree; its app binary is
// run from its target dir in the store. Even agents start at the base's
// commit; odd agents start at a commit made after the base (Diverge: seeded
// source, asset, version and dependency edits, and the tracked symlink
// retargeted to an existing file), which the current base is forked for
// anyway, so stamping has files it must leave alone (invariant 1). A reverted
// edit restores the bytes of the base checkout in the store. A shared-target agent is a plain `git
// worktree add` worktree built with plain cargo and one CARGO_TARGET_DIR shared
// by every agent: the usual shortcut. The same harness must find no mismatch
// with Ferry agents and must find mismatches with shared-target agents, which
// proves it can fail (with Options.Lockstep and Options.Script the shared
// run's first round is deterministic: one agent edits a member and builds,
// then an unedited agent, whose files are older than that build, builds and
// gets the other agent's code).
package oracle
