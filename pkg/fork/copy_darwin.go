package fork

// copyFile copies src to dst from their current offsets to src's end, with
// read and write: macOS has no copy_file_range, and its copyfile(3) is a
// libSystem call x/sys does not wrap. (On APFS auto clones instead.)
func copyFile(dst, src int) error { return readWrite(dst, src) }
