#include "autoconf.h"

#include "kernel-host/overlay.h"
#include "protocol/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

int overlay_lower_open(const char *tree, pid_t sandbox_pid, int *fd_out, bool *idmapped)
{
        struct mount_attr attr = {
            .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        };
        char path[64];
        int fd, userns = -1, rc;

        *fd_out = -1;
        *idmapped = false;
        /* A clone, detached: it is attached nowhere in the host's tree, and
         * its flags are ours to set, whatever the tree's own mount has.
         * Not recursive: what is mounted inside the tree (a /proc or /sys
         * left from a chroot) stays out, as overlayfs leaves it out of a
         * layer given by its path. */
        fd = open_tree(AT_FDCWD, tree, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
        if (fd < 0)
                return -errno;
        snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)sandbox_pid);
        userns = open(path, O_RDONLY | O_CLOEXEC);
        if (userns < 0) {
                rc = -errno;
                goto fail;
        }
        attr.attr_set |= MOUNT_ATTR_IDMAP;
        attr.userns_fd = (__u64)userns;
        if (mount_setattr(fd, "", AT_EMPTY_PATH, &attr, sizeof(attr)) == 0) {
                *idmapped = true;
        } else if (errno == EINVAL || errno == EPERM || errno == EOPNOTSUPP) {
                /* A filesystem without idmapped mounts (or a tree holding
                 * such a mount): read-only all the same. */
                attr.attr_set &= ~(__u64)MOUNT_ATTR_IDMAP;
                attr.userns_fd = 0;
                if (mount_setattr(fd, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0) {
                        rc = -errno;
                        goto fail;
                }
        } else {
                rc = -errno;
                goto fail;
        }
        close(userns);
        *fd_out = fd;
        return 0;
fail:
        if (userns >= 0)
                close(userns);
        close(fd);
        return rc;
}

int overlay_idmap(int mount_fd, pid_t sandbox_pid, bool read_only)
{
        struct mount_attr attr = {
            .attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_IDMAP |
                        (read_only ? MOUNT_ATTR_RDONLY : 0),
        };
        char path[64];
        int userns, rc = 0;

        snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)sandbox_pid);
        userns = open(path, O_RDONLY | O_CLOEXEC);
        if (userns < 0)
                return -errno;
        attr.userns_fd = (__u64)userns;
        if (mount_setattr(mount_fd, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0)
                rc = -errno;
        close(userns);
        return rc;
}

/* The go-ahead is three bytes: 'g', which of the single descriptors
 * follow (in this order), and how many layers come after them. */
#define GO_LOWER 1
#define GO_HOME  2
#define GO_BUILD 4
#define GO_MAX_FDS (3 + OVERLAY_MAX_LAYERS + OVERLAY_MAX_VOLUMES)

int overlay_send_go(int sock, const struct overlay_fds *fds)
{
        char cbuf[CMSG_SPACE(GO_MAX_FDS * sizeof(int))];
        char go[4] = {'g', 0, 0, 0};
        struct iovec iov = {go, sizeof(go)};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
        struct cmsghdr *cmsg;
        int list[GO_MAX_FDS];
        size_t nfds = 0;
        ssize_t n;

        if (fds->nlayers > OVERLAY_MAX_LAYERS || fds->nvolumes > OVERLAY_MAX_VOLUMES)
                return -E2BIG;
        if (fds->lower >= 0) {
                list[nfds++] = fds->lower;
                go[1] |= GO_LOWER;
        }
        if (fds->home >= 0) {
                list[nfds++] = fds->home;
                go[1] |= GO_HOME;
        }
        if (fds->build >= 0) {
                list[nfds++] = fds->build;
                go[1] |= GO_BUILD;
        }
        for (size_t i = 0; i < fds->nlayers; i++)
                list[nfds++] = fds->layers[i];
        go[2] = (char)fds->nlayers;
        for (size_t i = 0; i < fds->nvolumes; i++)
                list[nfds++] = fds->volumes[i];
        go[3] = (char)fds->nvolumes;
        if (nfds > 0) {
                memset(cbuf, 0, sizeof(cbuf));
                msg.msg_control = cbuf;
                msg.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
                cmsg = CMSG_FIRSTHDR(&msg);
                cmsg->cmsg_level = SOL_SOCKET;
                cmsg->cmsg_type = SCM_RIGHTS;
                cmsg->cmsg_len = CMSG_LEN(nfds * sizeof(int));
                memcpy(CMSG_DATA(cmsg), list, nfds * sizeof(int));
        }
        do {
                n = sendmsg(sock, &msg, MSG_NOSIGNAL);
        } while (n < 0 && errno == EINTR);
        return n == (ssize_t)sizeof(go) ? 0 : n < 0 ? -errno : -EIO;
}

void overlay_fds_init(struct overlay_fds *fds)
{
        fds->lower = fds->home = fds->build = -1;
        fds->nlayers = 0;
        for (size_t i = 0; i < OVERLAY_MAX_LAYERS; i++)
                fds->layers[i] = -1;
        fds->nvolumes = 0;
        for (size_t i = 0; i < OVERLAY_MAX_VOLUMES; i++)
                fds->volumes[i] = -1;
}

int overlay_recv_go(int sock, struct overlay_fds *fds)
{
        char cbuf[CMSG_SPACE(GO_MAX_FDS * sizeof(int))];
        char go[4];
        struct iovec iov = {go, sizeof(go)};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
        struct cmsghdr *cmsg;
        int list[GO_MAX_FDS];
        size_t nfds = 0, next = 0, want, want_volumes;
        ssize_t n;

        overlay_fds_init(fds);
        msg.msg_control = cbuf;
        msg.msg_controllen = sizeof(cbuf);
        do {
                n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
        } while (n < 0 && errno == EINTR);
        if (n != (ssize_t)sizeof(go))
                return -1;
        for (cmsg = CMSG_FIRSTHDR(&msg); cmsg; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
                if (cmsg->cmsg_level == SOL_SOCKET && cmsg->cmsg_type == SCM_RIGHTS &&
                    cmsg->cmsg_len >= CMSG_LEN(sizeof(int)) &&
                    cmsg->cmsg_len <= CMSG_LEN(GO_MAX_FDS * sizeof(int))) {
                        nfds = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                        memcpy(list, CMSG_DATA(cmsg), nfds * sizeof(int));
                }
        }
        want = (size_t)(unsigned char)go[2];
        want_volumes = (size_t)(unsigned char)go[3];
        if (want > OVERLAY_MAX_LAYERS || want_volumes > OVERLAY_MAX_VOLUMES)
                return -1;
        if ((go[1] & GO_LOWER) && next < nfds)
                fds->lower = list[next++];
        if ((go[1] & GO_HOME) && next < nfds)
                fds->home = list[next++];
        if ((go[1] & GO_BUILD) && next < nfds)
                fds->build = list[next++];
        for (size_t i = 0; i < want && next < nfds; i++)
                fds->layers[fds->nlayers++] = list[next++];
        for (size_t i = 0; i < want_volumes && next < nfds; i++)
                fds->volumes[fds->nvolumes++] = list[next++];
        return 0;
}

/* Whether /proc/filesystems lists overlay. */
static bool overlay_listed(void)
{
        char line[128];
        bool found = false;
        FILE *f = fopen("/proc/filesystems", "re");

        while (f && !found && fgets(line, sizeof(line), f))
                found = strcmp(line, "nodev\toverlay\n") == 0;
        if (f)
                fclose(f);
        return found;
}

bool overlay_available(void)
{
        static int known = -1;
        int fd;

        if (known >= 0)
                return known;
        /* Opening a context loads the module when there is one (we are
         * root) and mounts nothing; unprivileged, the list says. */
        fd = (int)syscall(SYS_fsopen, "overlay", FSOPEN_CLOEXEC);
        if (fd >= 0)
                close(fd);
        known = fd >= 0 || (errno != ENODEV && overlay_listed());
        if (!known)
                log_warn("this kernel has no overlayfs: sandboxes of the host's form get a "
                         "read-only root (their home and /tmp are writable), and templates "
                         "cannot start");
        return known;
}
