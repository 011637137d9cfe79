// Package units observes which of Cargo's units a base's warm build used,
// and prunes the rest from its target.
//
// Placeholder: the analysis and the prune follow.
package units
