// Package record holds the formats of the records Ferry keeps of bases and
// agents (base.json and agent.json, with the parts they share: the
// confinement and what a relocation removed) and reads and checks them.
//
// Package base writes base.json and package agent writes agent.json; the
// formats live here so that a reader of the records links neither. The
// shim, started on every cargo call, reads both records on every call:
// with the formats in package base it linked the whole base builder, and
// the settings (package config) with it. So this package
// imports only the standard library, the store layout and the small
// packages it stands on (atomicfile, failure, and sandbox for the names of
// the isolation modes); pkg/cli's TestHotBinariesKeepTheirBudget holds
// the shim to cmd/ferry-shim/deps.txt.
package record

import (
	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/failure"
)

// read decodes the record at path; a damaged one (failure.DamagedError)
// carries the fix fix gives.
func read[T any](path string, fix func() string) (*T, error) {
	var r T
	if err := atomicfile.ReadJSON(path, &r); err != nil {
		if d := failure.AsDamaged(err); d != nil {
			d.Fix = fix()
		}
		return nil, err
	}
	return &r, nil
}
