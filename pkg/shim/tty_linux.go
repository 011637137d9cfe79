package shim

import "golang.org/x/sys/unix"

// ioctlGetTermios reads a terminal's settings: it fails on anything else.
const ioctlGetTermios = unix.TCGETS
