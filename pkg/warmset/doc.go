// Package warmset is what Ferry learns from the demand log (package
// demand): Select picks the commands a base warms beyond its defaults
// ([base] warm = "auto") within a budget of extra warm time, Summarize
// gives the hit rates `ferry stats` shows and the build host exports, and
// Explain reads an agent's last build (demand.LastBuild) against its base
// to say why Cargo compiled each unit (`ferry why`).
//
// It is the planning half of demand and runs in the base builder and the
// front; the shim, which only records, links package demand alone.
package warmset
