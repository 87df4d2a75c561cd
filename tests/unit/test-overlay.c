/* kernel-host/overlay.c: the sandbox's go-ahead carries a template's tree
 * (or the host's /usr), a disk home (homedisk.h), a build's new layer and
 * a built template's layers (layers.h), each optional; the receiver must
 * tell which descriptor is which whichever came, and the layers' order.
 * Plain files stand in for the detached mounts: what is checked is which
 * file arrives where. */
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

static void check_one(const char *what, bool sent, int given, int got)
{
        if (sent)
                ok(got >= 0 && same_file(got, given), "the %s arrives as the %s", what, what);
        else
                is_int(got, -1, "no %s: -1", what);
        if (got >= 0) {
                ok(fcntl(got, F_GETFD) & FD_CLOEXEC, "close-on-exec");
                close(got);
        }
}

static void check_go(bool with_lower, bool with_home, bool with_build, size_t nlayers,
                     const int files[4])
{
        struct overlay_fds fds, got;
        int sv[2];

        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                BAIL_OUT("socketpair: %s", strerror(errno));
        overlay_fds_init(&fds);
        fds.lower = with_lower ? files[0] : -1;
        fds.home = with_home ? files[1] : -1;
        fds.build = with_build ? files[2] : -1;
        /* Layers alternate between two files: their order must hold. */
        for (size_t i = 0; i < nlayers; i++)
                fds.layers[i] = files[i % 2 ? 3 : 0];
        fds.nlayers = nlayers;
        is_int(overlay_send_go(sv[0], &fds), 0, "send (lower %d, home %d, build %d, %zu layers)",
               with_lower, with_home, with_build, nlayers);
        is_int(overlay_recv_go(sv[1], &got), 0, "receive");
        check_one("tree", with_lower, files[0], got.lower);
        check_one("home", with_home, files[1], got.home);
        check_one("build's layer", with_build, files[2], got.build);
        is_int((int)got.nlayers, (int)nlayers, "every layer came");
        for (size_t i = 0; i < got.nlayers; i++) {
                ok(same_file(got.layers[i], files[i % 2 ? 3 : 0]), "layer %zu in its place", i);
                close(got.layers[i]);
        }
        close(sv[0]);
        close(sv[1]);
}

int main(void)
{
        int files[4] = {open("/dev/null", O_RDONLY | O_CLOEXEC),
                        open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC),
                        open("/dev/zero", O_RDONLY | O_CLOEXEC),
                        open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
        struct overlay_fds got;
        int sv[2];

        for (int i = 0; i < 4; i++) {
                if (files[i] < 0)
                        BAIL_OUT("open: %s", strerror(errno));
        }
        check_go(false, false, false, 0, files);
        check_go(true, false, false, 0, files);
        check_go(false, true, false, 0, files);
        check_go(true, true, false, 0, files);
        check_go(true, false, true, 0, files);
        check_go(true, true, false, 3, files);
        check_go(false, true, true, OVERLAY_MAX_LAYERS, files);
        /* More layers than a sandbox takes are refused, not cut. */
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                BAIL_OUT("socketpair: %s", strerror(errno));
        overlay_fds_init(&got);
        got.nlayers = OVERLAY_MAX_LAYERS + 1;
        is_int(overlay_send_go(sv[0], &got), -E2BIG, "too many layers: -E2BIG");
        close(sv[0]);
        close(sv[1]);
        /* A closed socket is no go-ahead: the sandbox's setup gives up. */
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                BAIL_OUT("socketpair: %s", strerror(errno));
        close(sv[0]);
        is_int(overlay_recv_go(sv[1], &got), -1, "closed socket: -1");
        ok(got.lower == -1 && got.home == -1 && got.build == -1 && got.nlayers == 0,
           "and no descriptors");
        close(sv[1]);
        for (int i = 0; i < 4; i++)
                close(files[i]);
        return done_testing();
}
