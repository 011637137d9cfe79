package units

// cargoLinksUplifts: on Linux Cargo hard-links a file it uplifts (a binary,
// an example, a root library) to the unit's output, so the inode recorded
// for the uplifted file names the unit.
const cargoLinksUplifts = true
