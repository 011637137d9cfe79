// Package units observes which of Cargo's units a base's warm build used,
// and prunes the others from its target.
//
// Why: a base refreshed across unit inputs is seeded with an older base's
// target, so the warm build only rebuilds what changed. Units the new
// commit no longer selects (a removed member, a dropped or bumped
// dependency, another feature set) stay behind, never checked against the
// new checkout. A ready base must hold only units its own warm build
// compiled or found fresh (invariant 2 of the architecture contract), so
// every unit an agent or a later refresh reuses was checked against what
// stamping compares. This package is how the builder gets there
// (`ferry base`, steps 4 to 7):
//
//  1. TakeThreshold, in the base's warm-units directory
//     (store.Base.WarmUnits), after the seed is cloned and stamped and
//     before the first warm command.
//  2. The warm commands run with FERRY_WARM_UNITS naming that directory;
//     the shim records each build-type cargo call in it (record.go
//     describes the format; NewRecord and its methods write it).
//  3. Observe (or ReadRecords and Analyze) works out which units were
//     used. When Observation.Complete is false, the observation cannot be
//     trusted: empty the target and build it again without a seed.
//  4. Prune deletes the rest, and rustc's incremental dirs the units it
//     deletes most likely left (their crate's, unwritten by the warm
//     build): without that, every change of unit inputs would leave one
//     dir more per crate it reached, which no cold build has. Those dirs
//     are caches only; one taken wrongly costs a compile its reuse.
//
// A unit is used when Cargo wrote its fingerprint after the threshold, or
// when a recorded message names it: by a file inside its own directory or
// named with its hash, or, for files Cargo uplifts without the hash
// (binaries, examples, root proc macros and dylibs) and rustdoc's output,
// as the only unit of that package holding the fingerprint Cargo names
// after the target; among several, the one a message reporting a rebuild
// finds rebuilt, else the one whose outputs have the recorded inode (Linux
// hard-links uplifted files) or else length and mtime (where Cargo copies:
// macOS, where the inode is not tried at all; see cargoLinksUplifts).
//
// The observation is incomplete, with a Reason each, when a call was
// unobservable or did not finish, a record is damaged, no call was
// recorded, a message matches no unit or several, a rebuilt unit's
// fingerprint predates the threshold, a written unit was reported by no
// message (a cargo call that bypassed the shim) although every call
// succeeded, a directory of the target cannot be read, or a profile dir
// holds what neither of Cargo's layouts has (see scan.go). After a call
// that failed (or did not finish), a written unit no message reported is
// one that failed to build (Cargo leaves its fingerprint dir, emptied, and
// reports nothing), and it counts as unused.
//
// Nested workspaces' target dirs (<target>/ferry-ws/<path>/) are not
// observed: Analyze neither scans them nor counts messages about them,
// Prune never touches them, and Observation.Nested says they are there.
// A refresh across unit inputs must drop the seed's ferry-ws/ before its
// warm build (the architecture's step 3), so that what is there after it
// was built by it alone.
//
// List is the scan alone, for a target no warm build is judged on (the
// relocation plan, package relocate): every unit, nested workspaces'
// target dirs included, and what could not be read or placed.
//
// The errors are typed (RecordError, ThresholdError, IncompleteError,
// PruneError); nothing here prints.
package units
