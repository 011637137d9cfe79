package share

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to start writing f's dirty pages to disk
// now, without waiting: the syncfs before base.json then finds most of the
// target written already, the disk having worked while the stream was
// decompressed. Only a hint: an error changes nothing (SyncTree makes the
// files durable).
func startWriteback(f *os.File) {
	_ = unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
}
