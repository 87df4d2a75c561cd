#include "autoconf.h"

#include "kernel-host/checkpoint.h"
#include "protocol/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "kernel-host/checkpoint_internal.h"

/* What CRIU learns of the kernel at each run (its kerndat: vDSO, CPU
 * features, what the kernel's interfaces accept) took about 50 ms of every
 * dump and every restore here. CRIU keeps it in /run/criu.kdat, but only
 * where /run is a tmpfs, as on a host that runs systemd; in a container,
 * or on a host like this one, /run is not, and every run learns it again.
 * There, criu runs in a mount namespace of its own whose /run is a tmpfs
 * of the kernel-host's: a detached mount, which nothing on the host sees,
 * cloned into each run's namespace, so what one run learnt the next reads. */

static int kdat_fd = -1;

void checkpoint_kdat_init(void)
{
        struct statfs s;
        int fs;

        if (kdat_fd >= 0 || (statfs("/run", &s) == 0 && s.f_type == TMPFS_MAGIC))
                return;
        fs = fsopen("tmpfs", FSOPEN_CLOEXEC);
        if (fs >= 0) {
                if (fsconfig(fs, FSCONFIG_SET_STRING, "size", "1m", 0) == 0 &&
                    fsconfig(fs, FSCONFIG_SET_STRING, "mode", "0700", 0) == 0 &&
                    fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) == 0)
                        kdat_fd = fsmount(fs, FSMOUNT_CLOEXEC,
                                          MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
                close(fs);
        }
        if (kdat_fd < 0)
                log_warn("criu learns the kernel's features at every run: /run is not a tmpfs, "
                         "and no tmpfs could be made for it (%s)",
                         strerror(errno));
}

/* Whether path, or the directory it would be made in, lies under /run
 * once its links are followed. */
static bool under_run(const char *path)
{
        char real[PATH_MAX], parent[PATH_MAX], *slash;

        if (!realpath(path, real)) {
                snprintf(parent, sizeof(parent), "%s", path);
                slash = strrchr(parent, '/');
                if (slash)
                        *(slash == parent ? slash + 1 : slash) = '\0';
                if (!realpath(parent, real))
                        return true; /* unknown: assume the worst */
        }
        return strncmp(real, "/run", 4) == 0 && (real[4] == '/' || real[4] == '\0');
}

/* Whether criu is given a path under /run (as itself, or in mnt[K]:PATH
 * and fd[N]:PATH), which a tmpfs there would hide. */
static bool names_run(char *const argv[])
{
        for (size_t i = 1; argv[i]; i++) {
                const char *p = argv[i], *sep = strstr(p, "]:");

                if (sep && (strncmp(p, "mnt[", 4) == 0 || strncmp(p, "fd[", 3) == 0))
                        p = sep + 2;
                if (p[0] == '/' && under_run(p))
                        return true;
        }
        return false;
}

int checkpoint_kdat_clone(char *const argv[])
{
        if (kdat_fd < 0 || names_run(argv))
                return -1;
        return open_tree(kdat_fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
}

void checkpoint_kdat_enter(int clone, bool own_namespace)
{
        if (clone < 0)
                return;
        if (own_namespace ||
            (unshare(CLONE_NEWNS) == 0 && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0))
                move_mount(clone, "", AT_FDCWD, "/run", MOVE_MOUNT_F_EMPTY_PATH);
        close(clone);
}
