package fork

// HostTarget is the link Ferry points into the agent's live namespace.
func (overlayBackend) HostTarget(a Agent) string { return a.Files.HostTarget }

// Reach is not yet known.
func (overlayBackend) Reach(a Agent) (string, bool) { return "", false }
