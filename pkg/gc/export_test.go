package gc

// SetBeforeReap makes f run between a pass's look at an agent and its
// reaping under the locks, until the returned func restores the default.
func SetBeforeReap(f func(name string)) (restore func()) {
	old := beforeReap
	beforeReap = f
	return func() { beforeReap = old }
}
