package lock

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// Holders returns the pids that /proc/locks names as holding a flock on
// path, shared or exclusive, lowest first. Best effort (nil where /proc/locks
// cannot be read, as off Linux): it is for naming processes in an error or a
// listing, never for deciding whether a lock is free, which only taking it
// (Held) answers.
func Holders(path string) []int {
	fi, err := os.Stat(path)
	if err != nil {
		return nil
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	data, err := os.ReadFile("/proc/locks")
	if err != nil {
		return nil
	}
	// "1: FLOCK  ADVISORY  READ  1234 fd:01:56789 0 EOF"
	want := ":" + strconv.FormatUint(st.Ino, 10)
	major, minor := (st.Dev>>8)&0xfff, (st.Dev&0xff)|((st.Dev>>12)&0xfff00)
	dev := fmt.Sprintf("%02x:%02x", major, minor)
	seen := map[int]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[1] != "FLOCK" {
			continue
		}
		if f[len(f)-1] == "EOF" && len(f) >= 8 && strings.HasSuffix(f[5], want) && strings.HasPrefix(f[5], dev) {
			if pid, err := strconv.Atoi(f[4]); err == nil && pid > 0 {
				seen[pid] = true
			}
		}
	}
	var pids []int
	for p := range seen {
		pids = append(pids, p)
	}
	sort.Ints(pids)
	return pids
}
