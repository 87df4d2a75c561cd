/* libFuzzer target for the gateway/kernel-host messages (protocol/hostmsg.h).
 *
 * The input is sent as one raw datagram over a SOCK_SEQPACKET socketpair and
 * received with hostmsg_recv; it carries ((input length + 1) %
 * (HOSTMSG_MAX_FDS + 2)) descriptors, so one more than a message may have is
 * tried too and the empty datagram carries one, and every other length class
 * is received with fds NULL. The input is sent once more as a body in a
 * sealed memfd (the way bodies past HOSTMSG_MAX_INLINE travel). The input
 * is also parsed as JSON and handed to every decoder. Invariants: no
 * descriptor is ever left open that the caller was not handed; what hostmsg_recv hands
 * over is exactly what was sent, close-on-exec; whatever a decoder accepts
 * passes the checks its users rely on (a START, hostmsg_start_check's
 * bounds), and its encoder turns it into a body that decodes to the same
 * message and encodes to the same JSON. */
#include "autoconf.h"

#include "protocol/hostmsg.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

static int sock[2] = {-1, -1};
static int devnull = -1; /* what is sent as descriptors */

static void fail(const char *what)
{
        fprintf(stderr, "fuzz-hostmsg: invariant broken: %s\n", what);
        abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
        int sndbuf = 1 << 20;

        (void)argc;
        (void)argv;
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sock) < 0)
                fail("socketpair");
        setsockopt(sock[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
        devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (devnull < 0)
                fail("open /dev/null");
        return 0;
}

static int same_strv(char **a, char **b)
{
        size_t i = 0;

        for (; a && b && a[i] && b[i]; i++) {
                if (strcmp(a[i], b[i]) != 0)
                        return 0;
        }
        return a && b && !a[i] && !b[i];
}

static void check_id(const char *id, const char *what)
{
        if (!jp_uuid_valid(id, strlen(id)))
                fail(what);
}

/* Encoding the message decoded from an encoding gives the same JSON. */
static void check_stable(json_t *first, json_t *second, const char *what)
{
        if (!json_equal(first, second))
                fail(what);
}

static void check_sandbox(json_t *body)
{
        struct hostmsg_sandbox a, b;
        json_t *again, *third;

        if (hostmsg_sandbox_decode(body, &a) != 0) {
                if (a.ro_paths)
                        fail("a refused SANDBOX_CREATE left ro_paths allocated");
                return;
        }
        check_id(a.sandbox_id, "SANDBOX_CREATE accepted an invalid sandbox_id");
        if (!a.ro_paths)
                fail("SANDBOX_CREATE decoded without ro_paths");
        for (char **p = a.ro_paths; *p; p++) {
                if ((*p)[0] != '/' || strstr(*p, "/.."))
                        fail("SANDBOX_CREATE accepted a relative ro_path or one with \"/..\"");
        }
        if (a.limits.memory_mb == 0 || a.limits.cpu_millis == 0 || a.limits.pids == 0 ||
            a.limits.disk_mb == 0)
                fail("SANDBOX_CREATE accepted a zero limit");
        again = hostmsg_sandbox_encode(&a);
        if (!again || hostmsg_sandbox_decode(again, &b) != 0)
                fail("SANDBOX_CREATE does not survive encode + decode");
        if (strcmp(a.sandbox_id, b.sandbox_id) || a.limits.memory_mb != b.limits.memory_mb ||
            a.limits.cpu_millis != b.limits.cpu_millis || a.limits.pids != b.limits.pids ||
            a.limits.disk_mb != b.limits.disk_mb || !same_strv(a.ro_paths, b.ro_paths) ||
            a.sandbox != b.sandbox)
                fail("SANDBOX_CREATE differs after encode + decode");
        third = hostmsg_sandbox_encode(&b);
        check_stable(again, third, "SANDBOX_CREATE encodes differently the second time");
        hostmsg_sandbox_clear(&a);
        hostmsg_sandbox_clear(&b);
        json_decref(again);
        json_decref(third);
}

static void check_start(json_t *body)
{
        struct hostmsg_start a, b;
        json_t *again, *third;

        if (hostmsg_start_decode(body, &a) != 0) {
                if (a.argv || a.env)
                        fail("a refused START left argv or env allocated");
                return;
        }
        check_id(a.id, "START accepted an invalid id");
        check_id(a.sandbox_id, "START accepted an invalid sandbox_id");
        if (!a.argv || !a.argv[0] || !a.env)
                fail("START decoded without argv or env");
        for (char **e = a.env; *e; e++) {
                if (!strchr(*e, '='))
                        fail("START accepted an env entry without '='");
        }
        if (a.cwd[0] && a.cwd[0] != '/')
                fail("START accepted a relative cwd");
        if (hostmsg_start_check(&a, NULL, 0) != 0)
                fail("START accepted a request past hostmsg_start_check's bounds");
        again = hostmsg_start_encode(&a);
        if (!again || hostmsg_start_decode(again, &b) != 0)
                fail("START does not survive encode + decode");
        if (strcmp(a.id, b.id) || strcmp(a.sandbox_id, b.sandbox_id) || a.kernel != b.kernel ||
            strcmp(a.kernelspec_dir, b.kernelspec_dir) || strcmp(a.key, b.key) ||
            strcmp(a.cwd, b.cwd) || !same_strv(a.argv, b.argv) || !same_strv(a.env, b.env) ||
            a.as_root != b.as_root)
                fail("START differs after encode + decode");
        if (a.kernel && a.as_root)
                fail("START accepted a kernel as root");
        third = hostmsg_start_encode(&b);
        check_stable(again, third, "START encodes differently the second time");
        hostmsg_start_clear(&a);
        hostmsg_start_clear(&b);
        json_decref(again);
        json_decref(third);
}

/* The messages that own no memory: decode, check the id, encode, decode
 * again and compare. */
#define CHECK_SIMPLE(kind, id, decode, encode, clear, equal)                                       \
        do {                                                                                       \
                struct kind a, b;                                                                  \
                json_t *again, *third;                                                             \
                                                                                                   \
                memset(&a, 0, sizeof(a));                                                          \
                memset(&b, 0, sizeof(b));                                                          \
                if (decode(body, &a) != 0)                                                         \
                        break;                                                                     \
                check_id(a.id, #kind " accepted an invalid " #id);                                 \
                again = encode(&a);                                                                \
                if (!again || decode(again, &b) != 0)                                              \
                        fail(#kind " does not survive encode + decode");                           \
                if (!(equal))                                                                      \
                        fail(#kind " differs after encode + decode");                              \
                third = encode(&b);                                                                \
                check_stable(again, third, #kind " encodes differently the second time");          \
                json_decref(again);                                                                \
                json_decref(third);                                                                \
                clear(&a);                                                                         \
                clear(&b);                                                                         \
        } while (0)

/* For the messages that own nothing once decoded. */
#define NO_CLEAR(m) ((void)(m))

static void check_all(json_t *body)
{
        check_sandbox(body);
        check_start(body);
        CHECK_SIMPLE(
            hostmsg_sandbox_ready, sandbox_id, hostmsg_sandbox_ready_decode,
            hostmsg_sandbox_ready_encode, hostmsg_sandbox_ready_clear,
            !strcmp(a.sandbox_id, b.sandbox_id) && a.init_pid == b.init_pid && a.init_pid >= 0 &&
                a.user_uid == b.user_uid && a.user_uid != (unsigned)-1 &&
                a.user_gid == b.user_gid && a.user_gid != (unsigned)-1 && a.root[0] == '/' &&
                !strcmp(a.root, b.root) && a.has_root == b.has_root && a.root_uid == b.root_uid &&
                a.root_gid == b.root_gid && (!a.has_root || a.root_uid != 0));
        CHECK_SIMPLE(hostmsg_started, id, hostmsg_started_decode, hostmsg_started_encode, NO_CLEAR,
                     !strcmp(a.id, b.id) && a.pid == b.pid && a.pid > 0 &&
                         !strcmp(a.ipc_prefix, b.ipc_prefix));
        CHECK_SIMPLE(hostmsg_failed, id, hostmsg_failed_decode, hostmsg_failed_encode, NO_CLEAR,
                     !strcmp(a.id, b.id) && !strcmp(a.step, b.step) && a.error == b.error &&
                         !strcmp(a.message, b.message));
        CHECK_SIMPLE(hostmsg_signal, id, hostmsg_signal_decode, hostmsg_signal_encode, NO_CLEAR,
                     !strcmp(a.id, b.id) && a.signal == b.signal && a.signal >= 0 &&
                         a.signal <= 64);
        CHECK_SIMPLE(hostmsg_exit, id, hostmsg_exit_decode, hostmsg_exit_encode, NO_CLEAR,
                     !strcmp(a.id, b.id) && a.pid == b.pid && a.pid >= 0 &&
                         a.exit_code == b.exit_code && a.signal == b.signal &&
                         !strcmp(a.reason, b.reason));
}

/* Sends the input as one datagram carrying n copies of devnull. */
static int send_input(const uint8_t *data, size_t size, size_t n)
{
        union {
                char buf[CMSG_SPACE(sizeof(int) * (HOSTMSG_MAX_FDS + 1))];
                struct cmsghdr align;
        } control;
        struct iovec iov = {(void *)data, size};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        struct cmsghdr *c;

        if (n) {
                memset(&control, 0, sizeof(control));
                mh.msg_control = control.buf;
                mh.msg_controllen = CMSG_SPACE(sizeof(int) * n);
                c = CMSG_FIRSTHDR(&mh);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int) * n);
                for (size_t i = 0; i < n; i++)
                        memcpy(CMSG_DATA(c) + i * sizeof(int), &devnull, sizeof(int));
        }
        return sendmsg(sock[0], &mh, MSG_NOSIGNAL) == (ssize_t)size ? 0 : -1;
}

/* The lowest free descriptor number: received descriptors take the lowest
 * free numbers, so one left open changes it. */
static int lowest_free_fd(void)
{
        int fd = dup(devnull);

        if (fd < 0)
                fail("dup");
        close(fd);
        return fd;
}

/* Sends the input as a body in a sealed memfd, as hostmsg_send sends a
 * large one: a header datagram saying so, the memfd its descriptor. */
static int send_memfd(const uint8_t *data, size_t size)
{
        const int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL;
        uint32_t head[2] = {HOSTMSG_START, (uint32_t)size | 0x80000000u};
        union {
                char buf[CMSG_SPACE(sizeof(int))];
                struct cmsghdr align;
        } control;
        struct iovec iov = {head, sizeof(head)};
        struct msghdr mh = {.msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = control.buf,
                            .msg_controllen = sizeof(control.buf)};
        struct cmsghdr *c;
        int fd = memfd_create("fuzz-hostmsg", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        int rc = -1;

        if (fd < 0)
                fail("memfd_create");
        if ((size && write(fd, data, size) != (ssize_t)size) || fcntl(fd, F_ADD_SEALS, seals) < 0)
                fail("memfd write");
        memset(&control, 0, sizeof(control));
        c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
        if (sendmsg(sock[0], &mh, MSG_NOSIGNAL) == (ssize_t)sizeof(head))
                rc = 0;
        close(fd);
        return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        size_t nsent = (size + 1) % (HOSTMSG_MAX_FDS + 2);
        int want_fds = (size / (HOSTMSG_MAX_FDS + 2)) % 2 == 0;
        int fds[HOSTMSG_MAX_FDS];
        int lowest = lowest_free_fd();
        enum hostmsg_type type;
        size_t nfds = 99;
        json_t *body = NULL;
        int rc;

        /* The transport: the input as a datagram from a peer that does not
         * use hostmsg_send. */
        if (send_input(data, size, nsent) == 0) {
                rc = want_fds ? hostmsg_recv(sock[1], &type, &body, fds, &nfds)
                              : hostmsg_recv(sock[1], &type, &body, NULL, NULL);
                if (!want_fds)
                        nfds = 0;
                if (rc == 0) {
                        if (!json_is_object(body))
                                fail("hostmsg_recv returned a body that is not an object");
                        if (nsent > HOSTMSG_MAX_FDS)
                                fail("hostmsg_recv accepted more than HOSTMSG_MAX_FDS descriptors");
                        if (want_fds && nfds != nsent)
                                fail("hostmsg_recv handed over a different number of descriptors");
                        for (size_t i = 0; i < nfds; i++) {
                                int flags = fcntl(fds[i], F_GETFD);

                                if (flags < 0 || !(flags & FD_CLOEXEC))
                                        fail("a received descriptor is not close-on-exec");
                                close(fds[i]);
                        }
                        check_all(body);
                        json_decref(body);
                } else if (rc != -EBADMSG && !(rc == -EPIPE && size == 0)) {
                        fail("unexpected hostmsg_recv error");
                } else if (body || nfds != 0) {
                        fail("a refused datagram left a body or descriptors");
                }
                if (lowest_free_fd() != lowest)
                        fail("a received descriptor was left open");
        }

        /* The input as a body that came in a memfd. */
        if (send_memfd(data, size) == 0) {
                nfds = 99;
                rc = hostmsg_recv(sock[1], &type, &body, fds, &nfds);
                if (rc == 0) {
                        if (!json_is_object(body) || nfds != 0)
                                fail("a memfd body came back as something else");
                        check_all(body);
                        json_decref(body);
                } else if (rc != -EBADMSG || body || nfds != 0) {
                        fail("a refused memfd body left a body or descriptors");
                }
                if (lowest_free_fd() != lowest)
                        fail("a memfd body's descriptor was left open");
        }

        /* The decoders alone, on the input as JSON. */
        body = json_loadb((const char *)data, size, 0, NULL);
        if (json_is_object(body))
                check_all(body);
        json_decref(body);
        return 0;
}
