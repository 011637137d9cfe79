package units

// ObserveCopied is Observe as on macOS, where Cargo copies the files it
// uplifts instead of hard-linking them (cargoLinksUplifts), so that the
// tests on Linux take the path macOS takes.
func ObserveCopied(target, warmUnits string) (*Observation, error) {
	return observe(target, warmUnits, false)
}
