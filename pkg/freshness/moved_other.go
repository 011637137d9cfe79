//go:build !linux

package freshness

import "golang.org/x/sys/unix"

// utimensat's special times: the current time, and the time left as it is
// (macOS's <sys/stat.h>; x/sys does not name them there).
const utimeNow, utimeOmit = -1, -2

// dirOpenFlags open a directory of the checkout to look up names in,
// never a link to one (no O_PATH here: it is opened for reading).
const dirOpenFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
