#include "autoconf.h"

#include "kernel-host/overlay.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
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

/* The go-ahead is two bytes: 'g', then which descriptors follow, in this
 * order. */
#define GO_LOWER 1
#define GO_HOME  2

int overlay_send_go(int sock, int lower_fd, int home_fd)
{
        char cbuf[CMSG_SPACE(2 * sizeof(int))];
        char go[2] = {'g', 0};
        struct iovec iov = {go, sizeof(go)};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
        struct cmsghdr *cmsg;
        int fds[2];
        size_t nfds = 0;
        ssize_t n;

        if (lower_fd >= 0) {
                fds[nfds++] = lower_fd;
                go[1] |= GO_LOWER;
        }
        if (home_fd >= 0) {
                fds[nfds++] = home_fd;
                go[1] |= GO_HOME;
        }
        if (nfds > 0) {
                memset(cbuf, 0, sizeof(cbuf));
                msg.msg_control = cbuf;
                msg.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
                cmsg = CMSG_FIRSTHDR(&msg);
                cmsg->cmsg_level = SOL_SOCKET;
                cmsg->cmsg_type = SCM_RIGHTS;
                cmsg->cmsg_len = CMSG_LEN(nfds * sizeof(int));
                memcpy(CMSG_DATA(cmsg), fds, nfds * sizeof(int));
        }
        do {
                n = sendmsg(sock, &msg, MSG_NOSIGNAL);
        } while (n < 0 && errno == EINTR);
        return n == (ssize_t)sizeof(go) ? 0 : n < 0 ? -errno : -EIO;
}

int overlay_recv_go(int sock, int *lower_fd, int *home_fd)
{
        char cbuf[CMSG_SPACE(2 * sizeof(int))];
        char go[2];
        struct iovec iov = {go, sizeof(go)};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
        struct cmsghdr *cmsg;
        int fds[2] = {-1, -1};
        size_t nfds = 0, next = 0;
        ssize_t n;

        *lower_fd = -1;
        *home_fd = -1;
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
                    cmsg->cmsg_len <= CMSG_LEN(2 * sizeof(int))) {
                        nfds = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                        memcpy(fds, CMSG_DATA(cmsg), nfds * sizeof(int));
                }
        }
        if ((go[1] & GO_LOWER) && next < nfds)
                *lower_fd = fds[next++];
        if ((go[1] & GO_HOME) && next < nfds)
                *home_fd = fds[next++];
        return 0;
}
