/* kernel-host/overlay.c: the sandbox's go-ahead carries a template's tree
 * and a disk home (homedisk.h), each optional; the receiver must tell which
 * descriptor is which whichever came. Plain files stand in for the
 * detached mounts: what is checked is which file arrives where. */
#include "kernel-host/overlay.c"

#include "tests/unit/tap.h"

#include <sys/stat.h>

/* Same file (device and inode) behind both descriptors? */
static bool same_file(int a, int b)
{
        struct stat sa, sb;

        return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
               sa.st_ino == sb.st_ino;
}

static void check_go(bool with_lower, bool with_home, int lower, int home)
{
        int sv[2], got_lower = -2, got_home = -2;

        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                BAIL_OUT("socketpair: %s", strerror(errno));
        is_int(overlay_send_go(sv[0], with_lower ? lower : -1, with_home ? home : -1), 0,
               "send (lower %d, home %d)", with_lower, with_home);
        is_int(overlay_recv_go(sv[1], &got_lower, &got_home), 0, "receive");
        if (with_lower)
                ok(got_lower >= 0 && same_file(got_lower, lower), "the tree arrives as the tree");
        else
                is_int(got_lower, -1, "no tree: -1");
        if (with_home)
                ok(got_home >= 0 && same_file(got_home, home), "the home arrives as the home");
        else
                is_int(got_home, -1, "no home: -1");
        if (got_lower >= 0) {
                ok(fcntl(got_lower, F_GETFD) & FD_CLOEXEC, "close-on-exec");
                close(got_lower);
        }
        if (got_home >= 0)
                close(got_home);
        close(sv[0]);
        close(sv[1]);
}

int main(void)
{
        int lower = open("/dev/null", O_RDONLY | O_CLOEXEC);
        int home = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        int sv[2], a = -2, b = -2;

        if (lower < 0 || home < 0)
                BAIL_OUT("open: %s", strerror(errno));
        check_go(false, false, lower, home);
        check_go(true, false, lower, home);
        check_go(false, true, lower, home);
        check_go(true, true, lower, home);
        /* A closed socket is no go-ahead: the sandbox's setup gives up. */
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                BAIL_OUT("socketpair: %s", strerror(errno));
        close(sv[0]);
        is_int(overlay_recv_go(sv[1], &a, &b), -1, "closed socket: -1");
        ok(a == -1 && b == -1, "and no descriptors");
        close(sv[1]);
        close(lower);
        close(home);
        return done_testing();
}
