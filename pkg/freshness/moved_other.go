//go:build !linux

package freshness

// utimensat's special times: the current time, and the time left as it is
// (macOS's <sys/stat.h>; x/sys does not name them there).
const utimeNow, utimeOmit = -1, -2
