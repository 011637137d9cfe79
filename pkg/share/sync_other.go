//go:build !linux

package share

import "syscall"

// syncfs makes the pulled base's writes durable before base.json promises
// a complete target.
func syncfs(string) error {
	syscall.Sync()
	return nil
}
