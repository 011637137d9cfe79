package freshness

import "golang.org/x/sys/unix"

// utimensat's special times: the current time, and the time left as it is.
const utimeNow, utimeOmit = unix.UTIME_NOW, unix.UTIME_OMIT
