// The in-place sandbox entry: a constructor that runs before the Go runtime
// starts, while the process is still single-threaded, so it may unshare a
// user namespace itself (see inplace.go for why and when).
//
// It acts only when argv[1] is one of its markers; any other process
// returns at once. Its arguments, written by Exec and ExecJoin:
//
//   argv[0] marker dir nsteps {op a b c name}... -- path argv...
//   argv[0] join-marker userfd mntfd dir store world nbinds {src dst}... noverlays {target view upper work}... nmasked {path}... -- path argv...
//
// with clean absolute paths, store "" for none, view "" for none, world "1"
// when the host must show read-only. The steps are the ones package
// sandbox compiles for its own child (confine.go), so the two make the
// same namespace; this file only runs them. The
// environment is the command's. On success it execs path; on a failure it
// execs this binary again with the failure marker, the step, the errno, the
// store path concerned and a message, so that Go reports it exactly as a
// sandbox child's failure. (It also joins a sandbox child to a live
// namespace, see join.)

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "enter_linux.h"

static char **ferry_argv;
static char **ferry_envp;

// fail hands the failure to Go and never returns; path is a store path that
// is not what Ferry made.
static void fail_msg(const char *step, int err, const char *path, const char *msg) {
	char num[16];
	snprintf(num, sizeof num, "%d", err);
	char *argv[] = {ferry_argv[0], FERRY_INPLACE_FAILED, (char *)step, num, (char *)(path ? path : ""), (char *)msg, NULL};
	execve("/proc/self/exe", argv, ferry_envp);
	// Nothing is left to report through: say it plainly.
	fprintf(stderr, "ferry: sandbox: %s: %s\n", step, err ? strerror(err) : msg);
	_exit(127);
}

static void fail(const char *step, int err, const char *path) { fail_msg(step, err, path, ""); }

static int write_file(const char *path, const char *data) {
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t n = strlen(data);
	ssize_t w = write(fd, data, n);
	int saved = errno;
	close(fd);
	errno = saved;
	return w == (ssize_t)n ? 0 : -1;
}

// pin returns a name for path that mount(2) resolves to exactly the inode
// meant: for a path below the store, /proc/self/fd/N of a descriptor opened
// there without following a link (a link in the store was planted, and
// following it could mount another agent's fork); any other path as it is.
static const char *pin(int root, const char *store, const char *path, char *buf, size_t len) {
	size_t n = strlen(store);
	if (root < 0 || strncmp(path, store, n) != 0 || (path[n] != '/' && path[n] != '\0'))
		return path;
	if (path[n] == '\0') {
		snprintf(buf, len, "/proc/self/fd/%d", root);
		return buf;
	}
	struct open_how how = {
		.flags = O_PATH | O_CLOEXEC,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	int fd = syscall(SYS_openat2, root, path + n + 1, &how, sizeof how);
	if (fd < 0)
		return NULL;
	snprintf(buf, len, "/proc/self/fd/%d", fd);
	return buf;
}

// read_only makes the mount at dir read-only, not its submounts; the
// remount (which must repeat the flags the mount is locked with) is the
// fallback for a kernel without mount_setattr.
static int read_only(const char *dir) {
	struct mount_attr attr = {.attr_set = MOUNT_ATTR_RDONLY};
	if (syscall(SYS_mount_setattr, AT_FDCWD, dir, 0, &attr, sizeof attr) == 0)
		return 0;
	if (errno != ENOSYS)
		return -1;
	struct statvfs st;
	if (statvfs(dir, &st) < 0)
		return -1;
	unsigned long flags = MS_BIND | MS_REMOUNT | MS_RDONLY;
	if (st.f_flag & ST_NOSUID) flags |= MS_NOSUID;
	if (st.f_flag & ST_NODEV) flags |= MS_NODEV;
	if (st.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
	if (st.f_flag & ST_NOATIME) flags |= MS_NOATIME;
	if (st.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
	if (st.f_flag & ST_RELATIME) flags |= MS_RELATIME;
	return mount("", dir, NULL, flags, NULL);
}

// mask hides each of the n paths (below the store, pinned without
// following a link) in the sealed store, as package sandbox's mask does: a
// directory behind an empty read-only tmpfs, anything else behind
// /dev/null, read-only; a path that does not exist is left alone.
static void mask(int root, const char *store, char **paths, int n) {
	char step[4352], buf[64];
	for (int m = 0; m < n; m++) {
		struct stat st;
		if (lstat(paths[m], &st) < 0) {
			if (errno == ENOENT)
				continue;
			snprintf(step, sizeof step, "mask %s", paths[m]);
			fail(step, errno, NULL);
		}
		const char *at = pin(root, store, paths[m], buf, sizeof buf);
		if (!at) {
			snprintf(step, sizeof step, "open %s", paths[m]);
			fail(step, errno, paths[m]);
		}
		snprintf(step, sizeof step, "mask %s", paths[m]);
		if (S_ISDIR(st.st_mode)) {
			if (mount("tmpfs", at, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0555,size=4k") < 0)
				fail(step, errno, NULL);
			continue;
		}
		if (mount("/dev/null", at, NULL, MS_BIND, NULL) < 0 || read_only(paths[m]) < 0)
			fail(step, errno, NULL);
	}
}

// masked reports whether each of the n paths that exists is hidden in this
// namespace, as package sandbox's checkMasked does, and fails when one is
// not.
static void check_masked(char **paths, int n) {
	char msg[4352];
	struct stat null;
	if (stat("/dev/null", &null) < 0)
		fail(FERRY_STEP_CHECK, errno, NULL);
	for (int m = 0; m < n; m++) {
		struct stat st;
		if (lstat(paths[m], &st) < 0) {
			if (errno == ENOENT)
				continue;
			fail(FERRY_STEP_CHECK, errno, NULL);
		}
		int hidden;
		if (S_ISDIR(st.st_mode)) {
			struct statfs fs;
			hidden = statfs(paths[m], &fs) == 0 && fs.f_type == 0x01021994 /* TMPFS_MAGIC */ && (fs.f_flags & ST_RDONLY);
		} else {
			hidden = S_ISCHR(st.st_mode) && st.st_rdev == null.st_rdev;
		}
		if (!hidden) {
			snprintf(msg, sizeof msg, "%s is not hidden in the joined namespace", paths[m]);
			fail_msg(FERRY_STEP_CHECK, 0, NULL, msg);
		}
	}
}

// group reads a count at argv[*i] and returns the count groups of width
// arguments that follow it, moving *i past them; a plan that does not hold
// them is refused.
static char **group(int argc, char **argv, int *i, int width, int *count) {
	if (*i >= argc)
		fail("read plan", EINVAL, NULL);
	*count = atoi(argv[(*i)++]);
	if (*count < 0 || *i + width * *count >= argc)
		fail("read plan", EINVAL, NULL);
	char **g = argv + *i;
	*i += width * *count;
	return g;
}

// command returns the command's argv after the "--" at argv[i], and its
// path in *path.
static char **command(int argc, char **argv, int i, const char **path) {
	if (i + 1 >= argc || strcmp(argv[i], "--") != 0)
		fail("read plan", EINVAL, NULL);
	*path = argv[i + 1];
	return argv + i + 2;
}

// The state the steps share: the store's root, the pinned host paths, and
// the root just covered.
struct steps {
	const char *store;
	int root;
	int pins[256];
	int cover;
	const char *cover_at;
};

// resolve names path for mount(2) in buf (pinned below the store); NULL
// with errno set when it cannot be pinned.
static const char *resolve(struct steps *st, const char *path, char *buf, size_t len) {
	return pin(st->root, st->store, path, buf, len);
}

// open_pin opens path now, below the store without following a link.
static int open_pin(struct steps *st, const char *path) {
	size_t n = strlen(st->store);
	if (st->root >= 0 && strncmp(path, st->store, n) == 0 && (path[n] == '/' || path[n] == '\0')) {
		if (path[n] == '\0')
			return dup(st->root);
		struct open_how how = {
			.flags = O_PATH | O_CLOEXEC,
			.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
		};
		return syscall(SYS_openat2, st->root, path + n + 1, &how, sizeof how);
	}
	return open(path, O_PATH | O_CLOEXEC);
}

static int under(const char *path, const char *dir) {
	size_t n = strlen(dir);
	if (strcmp(dir, "/") == 0)
		return 1;
	return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

// drop_mount_cap drops CAP_SYS_ADMIN from the bounding set, as package
// sandbox's dropMountCap does: a command running as root in the namespace
// would get it back at exec, and could undo the read-only host.
static int drop_mount_cap(void) {
	if (prctl(PR_CAPBSET_DROP, 21 /* CAP_SYS_ADMIN */, 0, 0, 0) < 0)
		return (errno == EPERM && getuid() != 0) ? 0 : -1;
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct data[2];
	if (syscall(SYS_capget, &hdr, data) < 0)
		return -1;
	data[0].inheritable = data[1].inheritable = 0;
	return syscall(SYS_capset, &hdr, data);
}

// run_step runs one step (see package sandbox's runSteps, which this
// mirrors) and fails with its name when it cannot.
static void run_step(struct steps *st, char **s) {
	const char *op = s[0], *a = s[1], *b = s[2], *c = s[3], *name = s[4];
	char abuf[64], bbuf[64];
	struct stat sb;
	if (strcmp(op, "root") == 0) {
		st->store = a;
		st->root = open(a, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (st->root < 0)
			fail(name, errno, a);
	} else if (strcmp(op, "pin") == 0) {
		int slot = atoi(b);
		if (slot < 0 || slot >= (int)(sizeof st->pins / sizeof st->pins[0]))
			fail("read plan", EINVAL, NULL);
		st->pins[slot] = open_pin(st, a);
		if (st->pins[slot] < 0)
			fail(name, errno, a);
	} else if (strcmp(op, "check") == 0) {
		const char *q = resolve(st, a, abuf, sizeof abuf);
		if (!q)
			fail(name, errno, a);
		if (q != a)
			close(atoi(q + strlen("/proc/self/fd/")));
	} else if (strcmp(op, "bind") == 0) {
		if (strchr(c, '?') && lstat(a, &sb) < 0 && errno == ENOENT)
			return;
		const char *src = resolve(st, a, abuf, sizeof abuf);
		if (!src)
			fail(name, errno, a);
		const char *dst = resolve(st, b, bbuf, sizeof bbuf);
		if (!dst)
			fail(name, errno, b);
		if (mount(src, dst, NULL, MS_BIND | (strchr(c, 'r') ? MS_REC : 0), NULL) < 0)
			fail(name, errno, NULL);
	} else if (strcmp(op, "overlay") == 0) {
		int r = mount("overlay", a, "overlay", 0, b);
		if (r < 0 && errno == EINVAL && c[0] != '\0')
			r = mount("overlay", a, "overlay", 0, c);
		if (r < 0)
			fail(name, errno, NULL);
	} else if (strcmp(op, "cover") == 0) {
		if (st->cover >= 0)
			close(st->cover);
		st->cover = open(a, O_PATH | O_DIRECTORY | O_CLOEXEC);
		st->cover_at = a;
		if (st->cover < 0)
			fail(name, errno, NULL);
	} else if (strcmp(op, "keep") == 0) {
		int slot = atoi(a + 1);
		if (a[0] != '@' || slot < 0 || slot >= (int)(sizeof st->pins / sizeof st->pins[0]) || st->pins[slot] < 0 ||
		    st->cover < 0 || !under(b, st->cover_at))
			fail("read plan", EINVAL, NULL);
		const char *rel = b + strlen(st->cover_at);
		while (*rel == '/')
			rel++;
		struct open_how how = {
			.flags = O_PATH | O_CLOEXEC,
			.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
		};
		int at = syscall(SYS_openat2, st->cover, rel, &how, sizeof how);
		if (at < 0)
			fail(name, errno, b);
		snprintf(abuf, sizeof abuf, "/proc/self/fd/%d", st->pins[slot]);
		snprintf(bbuf, sizeof bbuf, "/proc/self/fd/%d", at);
		if (mount(abuf, bbuf, NULL, MS_BIND | MS_REC, NULL) < 0)
			fail(name, errno, NULL);
		close(at);
	} else if (strcmp(op, "tmpfs") == 0) {
		if (stat(a, &sb) < 0 || !S_ISDIR(sb.st_mode))
			return;
		if (mount("tmpfs", a, "tmpfs", MS_NOSUID | MS_NODEV, b) < 0)
			fail(name, errno, NULL);
	} else if (strcmp(op, "mask") == 0) {
		char *one[] = {(char *)a};
		mask(st->root, st->store, one, 1);
	} else if (strcmp(op, "ro") == 0) {
		if (strcmp(b, "r") == 0) {
			struct mount_attr attr = {.attr_set = MOUNT_ATTR_RDONLY};
			if (syscall(SYS_mount_setattr, AT_FDCWD, a, AT_RECURSIVE, &attr, sizeof attr) < 0)
				fail(name, errno, NULL);
		} else if (read_only(a) < 0) {
			fail(name, errno, NULL);
		}
	} else if (strcmp(op, "rw") == 0) {
		if (strchr(c, '?') && lstat(a, &sb) < 0 && errno == ENOENT)
			return;
		struct mount_attr attr = {.attr_clr = MOUNT_ATTR_RDONLY};
		// EPERM: read-only on the host already (locked so into the
		// namespace); it stays as the host has it.
		if (syscall(SYS_mount_setattr, AT_FDCWD, a, 0, &attr, sizeof attr) < 0 && errno != EPERM)
			fail(name, errno, NULL);
	} else if (strcmp(op, "dropcaps") == 0) {
		if (drop_mount_cap() < 0)
			fail(name, errno, NULL);
	} else {
		fail("read plan", EINVAL, NULL);
	}
}

static void enter(int argc, char **argv) {
	int i = 2;
	if (argc < 5)
		fail("read plan", EINVAL, NULL);
	const char *dir = argv[i++];
	int nsteps;
	char **steps = group(argc, argv, &i, 5, &nsteps);
	const char *path;
	char **cmd = command(argc, argv, i, &path);

	// Read before unshare: inside, until the maps are written, both are
	// the overflow id.
	char uid_map[64], gid_map[64];
	snprintf(uid_map, sizeof uid_map, "%u %u 1\n", (unsigned)getuid(), (unsigned)getuid());
	snprintf(gid_map, sizeof gid_map, "%u %u 1\n", (unsigned)getgid(), (unsigned)getgid());
	if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0)
		fail(FERRY_STEP_CREATE, errno, NULL);
	if (write_file("/proc/self/setgroups", "deny") < 0 || write_file("/proc/self/uid_map", uid_map) < 0 ||
	    write_file("/proc/self/gid_map", gid_map) < 0)
		fail(FERRY_STEP_CREATE, errno, NULL);

	if (mount("", "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		fail("make / private", errno, NULL);
	struct steps st = {.store = "", .root = -1, .cover = -1, .cover_at = ""};
	for (size_t p = 0; p < sizeof st.pins / sizeof st.pins[0]; p++)
		st.pins[p] = -1;
	for (int s = 0; s < nsteps; s++)
		run_step(&st, steps + 5 * s);
	if (chdir(dir) < 0)
		fail("chdir", errno, NULL);
	// The command gets no capability in the namespace unless it runs as
	// root there, exactly as from a sandbox child.
	prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	execve(path, cmd, ferry_envp);
	fail("exec", errno, NULL);
}

// unescape undoes mountinfo's octal escapes (\040 for a space) in place.
static void unescape(char *s) {
	char *w = s;
	for (char *r = s; *r;) {
		if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' && r[3] >= '0' && r[3] <= '7') {
			*w++ = (char)(((r[1] - '0') << 6) | ((r[2] - '0') << 3) | (r[3] - '0'));
			r += 4;
		} else {
			*w++ = *r++;
		}
	}
	*w = '\0';
}

// read_mountinfo returns this process's mountinfo, NUL-terminated, or NULL.
static char *read_mountinfo(void) {
	int fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	for (;;) {
		if (buf == NULL)
			break;
		if (len + 1 >= cap) {
			cap *= 2;
			char *more = realloc(buf, cap);
			if (more == NULL) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = more;
		}
		ssize_t n = read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			free(buf);
			buf = NULL;
			break;
		}
		if (n == 0) {
			buf[len] = '\0';
			break;
		}
		len += n;
	}
	int saved = errno;
	close(fd);
	errno = saved;
	return buf;
}

// is_overlay reports whether the mount processes see on point (the last
// one mounted there) is the overlay with exactly these upper and work
// dirs, as package sandbox's IsOverlay decides from the same file.
static int is_overlay(char *mountinfo, const char *point, const char *upper, const char *work) {
	int found = 0;
	char *line = mountinfo;
	while (line && *line) {
		char *end = strchr(line, '\n');
		if (end)
			*end = '\0';
		// 36 35 98:0 /root /point rw,noatime shared:1 - ext4 /dev/vda rw,errors=continue
		char *f[64];
		int n = 0;
		char *lsave = NULL;
		for (char *tok = strtok_r(line, " ", &lsave); tok && n < 64; tok = strtok_r(NULL, " ", &lsave))
			f[n++] = tok;
		int sep = -1;
		for (int i = 6; i < n; i++) {
			if (strcmp(f[i], "-") == 0) {
				sep = i;
				break;
			}
		}
		if (sep >= 0 && n > 4) {
			unescape(f[4]);
			if (strcmp(f[4], point) == 0) {
				int ok = sep + 1 < n && strcmp(f[sep + 1], "overlay") == 0;
				int up = 0, wk = 0;
				if (ok && sep + 3 < n) {
					char *save = NULL;
					for (char *o = strtok_r(f[sep + 3], ",", &save); o; o = strtok_r(NULL, ",", &save)) {
						if (strncmp(o, "upperdir=", 9) == 0) {
							unescape(o + 9);
							up = strcmp(o + 9, upper) == 0;
						} else if (strncmp(o, "workdir=", 8) == 0) {
							unescape(o + 8);
							wk = strcmp(o + 8, work) == 0;
						}
					}
				}
				found = ok && up && wk;
			}
		}
		line = end ? end + 1 : NULL;
	}
	return found;
}

// join_inplace enters the live namespaces of an overlay agent (the user
// namespace, then the mount namespace, the descriptors Go opened), checks
// that they show the plan's mounts and a sealed store, as a joined sandbox
// child's Go code does (package sandbox, checkMounts and checkSealed), and
// execs the command.
static void join_inplace(int argc, char **argv) {
	char msg[4352];
	int i = 2;
	if (argc < 10)
		fail("read plan", EINVAL, NULL);
	int userfd = atoi(argv[i++]), mntfd = atoi(argv[i++]);
	const char *dir = argv[i++];
	const char *store = argv[i++];
	int world = strcmp(argv[i++], "1") == 0;
	int nbinds, noverlays, nmasked;
	char **binds = group(argc, argv, &i, 2, &nbinds);
	char **overlays = group(argc, argv, &i, 4, &noverlays); // target view upper work
	char **masked = group(argc, argv, &i, 1, &nmasked);
	const char *path;
	char **cmd = command(argc, argv, i, &path);

	if (setns(userfd, CLONE_NEWUSER) < 0 || setns(mntfd, CLONE_NEWNS) < 0)
		fail_msg(FERRY_STEP_JOIN, errno, NULL, "setns");
	// They would keep the namespace alive for nothing once the command runs.
	close(userfd);
	close(mntfd);

	for (int b = 0; b < nbinds; b++) {
		struct stat src, dst;
		if (stat(binds[2 * b], &src) < 0 || stat(binds[2 * b + 1], &dst) < 0)
			fail(FERRY_STEP_CHECK, errno, NULL);
		if (src.st_dev != dst.st_dev || src.st_ino != dst.st_ino) {
			snprintf(msg, sizeof msg, "%s is not %s in the joined namespace", binds[2 * b + 1], binds[2 * b]);
			fail_msg(FERRY_STEP_CHECK, 0, NULL, msg);
		}
	}
	if (noverlays > 0) {
		char *mountinfo = read_mountinfo();
		if (mountinfo == NULL)
			fail(FERRY_STEP_CHECK, errno, NULL);
		size_t len = strlen(mountinfo);
		char *scratch = malloc(len + 1);
		if (scratch == NULL)
			fail(FERRY_STEP_CHECK, ENOMEM, NULL);
		for (int o = 0; o < noverlays; o++) {
			char **ov = overlays + 4 * o;
			for (int at = 0; at < 2; at++) {
				if (ov[at][0] == '\0')
					continue;
				memcpy(scratch, mountinfo, len + 1); // is_overlay cuts it up
				if (!is_overlay(scratch, ov[at], ov[2], ov[3])) {
					snprintf(msg, sizeof msg, "%s is not the overlay on %s in the joined namespace", ov[at], ov[2]);
					fail_msg(FERRY_STEP_CHECK, 0, NULL, msg);
				}
			}
		}
		free(scratch);
		free(mountinfo);
	}
	if (store[0] != '\0') {
		struct statvfs st;
		if (statvfs(store, &st) < 0 || !(st.f_flag & ST_RDONLY)) {
			snprintf(msg, sizeof msg, "the store %s is writable in the joined namespace", store);
			fail_msg(FERRY_STEP_CHECK, 0, NULL, msg);
		}
	}
	check_masked(masked, nmasked);
	if (world) {
		struct statvfs st;
		if (statvfs("/", &st) < 0 || !(st.f_flag & ST_RDONLY))
			fail_msg(FERRY_STEP_CHECK, 0, NULL, "the host is writable in the joined namespace");
	}
	if ((world || store[0] != '\0') && drop_mount_cap() < 0)
		fail("drop the capability to mount", errno, NULL);
	if (chdir(dir) < 0)
		fail("chdir", errno, NULL);
	prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	execve(path, cmd, ferry_envp);
	fail("exec", errno, NULL);
}

// join puts a sandbox child into the live namespaces at fds 4 (user) and 5
// (mount), as util-linux nsenter --preserve-credentials would, and returns
// to let the Go runtime start there: the child then checks the namespace's
// mounts (package sandbox). A failure goes to the status pipe, fd 3, in
// the child's own format.
static void join(void) {
	int fds[2] = {4, 5}, types[2] = {CLONE_NEWUSER, CLONE_NEWNS};
	for (int i = 0; i < 2; i++) {
		if (setns(fds[i], types[i]) < 0) {
			char msg[256];
			int n = snprintf(msg, sizeof msg, "{\"step\":\"%s\",\"errno\":%d,\"msg\":\"setns\"}", FERRY_STEP_JOIN, errno);
			if (write(3, msg, n) < 0)
				_exit(126);
			_exit(127);
		}
	}
}

__attribute__((constructor)) static void ferry_inplace(int argc, char **argv, char **envp) {
	if (argc < 2 || argv == NULL || argv[1] == NULL)
		return;
	if (argc >= 3 && strcmp(argv[1], FERRY_CHILD) == 0 && strcmp(argv[2], FERRY_JOIN) == 0) {
		join();
		return;
	}
	int joining = strcmp(argv[1], FERRY_INPLACE_JOIN) == 0;
	if (!joining && strcmp(argv[1], FERRY_INPLACE) != 0)
		return;
	ferry_argv = argv;
	ferry_envp = envp;
	if (joining)
		join_inplace(argc, argv);
	enter(argc, argv);
}
