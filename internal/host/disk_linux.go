package host

import "syscall"

// freeDisk returns the bytes available to unprivileged users on the file
// system of dir.
func freeDisk(dir string) (uint64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return st.Bavail * uint64(st.Bsize), true
}
