package units

// cargoLinksUplifts: on macOS Cargo copies a file it uplifts instead of
// hard-linking it (cargo-util's link_or_copy: Gatekeeper could kill a binary
// run right after it was hard-linked), with std's fs::copy, a clonefile on
// APFS that keeps the length and mtime. So an inode never names the unit
// and Analyze goes straight to length and mtime. (Where the copy fails with
// EAGAIN, on ZFS, Cargo hard-links after all; the link has the same length
// and mtime, so it matches the same way.)
const cargoLinksUplifts = false
