package freshness

import "golang.org/x/sys/unix"

// utimensat's special times: the current time, and the time left as it is.
const utimeNow, utimeOmit = unix.UTIME_NOW, unix.UTIME_OMIT

// dirOpenFlags open a directory of the checkout to look up names in,
// never a link to one.
const dirOpenFlags = unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
