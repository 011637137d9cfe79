package store

// readOnlyMount reports whether dir is sealed: never on macOS, which has
// no namespace sandbox to seal the store in. A store on a read-only volume
// fails at its first write instead, with the error the write meets.
func readOnlyMount(string) bool { return false }

// masked reports whether the store's secrets are covered: never on macOS.
func masked(string) bool { return false }
