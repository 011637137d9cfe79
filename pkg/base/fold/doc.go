// Package fold turns the layers of a layered refresh into a base's plain
// target. A refresh builds a new commit in an overlay whose lower layer is
// the seed base's sealed target; once the build is done, Fold (or Prefold
// while it runs, then Merge) makes the upper the tree the overlay showed,
// hard-linking every file only the lower had, so the new base is a plain
// directory any agent can fork, and costs what the build wrote. Layers
// finds and hides entries in an unmounted overlay, for the base's own
// pruning.
//
// It belongs to the base layer (package base calls it); package fork makes
// and enters forks and knows nothing of refreshes.
package fold
