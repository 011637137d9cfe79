package record

// Applied is what applying a relocation plan removed from a target
// (relocate.Plan.Apply): base.json records it for a base whose seed's or
// pulled target it relocated, agent.json for a fork.
type Applied struct {
	Paths   int   `json:"paths"`   // entries of the plan's Remove removed (absent ones are not counted)
	Files   int   `json:"files"`   // files and symlinks removed
	Bytes   int64 `json:"bytes"`   // their apparent sizes
	Emptied bool  `json:"emptied"` // the whole fork was emptied
}
