// Package docedit edits the settings files of other tools (JSON and TOML)
// keeping every byte it does not change, so that installing and then
// uninstalling Ferry's lines gives back the file byte for byte, whatever
// its key order, layout and comments.
//
// A JSON document is edited as a tree that remembers its own bytes: a
// value nobody changed is written back exactly as it was read, and a
// changed object or array keeps the whitespace around each member it
// already had. Only what is new gets fresh layout, indented like its
// neighbours.
//
// A TOML document is edited as text: only the one string value that
// changes is rewritten, a missing key goes right under its table's header,
// and a missing table at the end of the file. The result is parsed again
// and the value read back before it is returned: what the editor cannot
// place exactly is refused, never written.
package docedit
