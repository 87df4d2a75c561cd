/* libFuzzer target for the gateway/kernel-host messages (protocol/hostmsg.c).
 *
 * The input is sent as one raw datagram over a SOCK_SEQPACKET socketpair and
 * received with hostmsg_recv; it is also parsed as JSON and handed to every
 * decoder. Invariant: whatever a decoder accepts, its encoder turns into a
 * body that decodes to the same message. */
#include "autoconf.h"

#include "protocol/hostmsg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static int fds[2] = {-1, -1};

static void fail(const char *what)
{
        fprintf(stderr, "fuzz-hostmsg: invariant broken: %s\n", what);
        abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
        int sndbuf = 1 << 20;

        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) < 0)
                fail("socketpair");
        setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
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

static void check_start(json_t *body)
{
        struct hostmsg_start a, b;
        json_t *again;

        if (hostmsg_start_decode(body, &a) != 0) {
                if (a.argv || a.env)
                        fail("a refused START left argv or env allocated");
                return;
        }
        if (!a.argv || !a.argv[0] || !a.env)
                fail("START decoded without argv or env");
        for (char **e = a.env; *e; e++) {
                if (!strchr(*e, '='))
                        fail("START accepted an env entry without '='");
        }
        again = hostmsg_start_encode(&a);
        if (!again || hostmsg_start_decode(again, &b) != 0)
                fail("START does not survive encode + decode");
        if (strcmp(a.kernel_id, b.kernel_id) || strcmp(a.kernelspec_dir, b.kernelspec_dir) ||
            strcmp(a.key, b.key) || !same_strv(a.argv, b.argv) || !same_strv(a.env, b.env) ||
            memcmp(&a.limits, &b.limits, sizeof(a.limits)) || a.sandbox != b.sandbox)
                fail("START differs after encode + decode");
        hostmsg_start_clear(&a);
        hostmsg_start_clear(&b);
        json_decref(again);
}

#define CHECK_SIMPLE(kind, decode, encode, equal)                                                  \
        do {                                                                                       \
                struct kind a, b;                                                                  \
                json_t *again;                                                                     \
                                                                                                   \
                memset(&a, 0, sizeof(a));                                                          \
                memset(&b, 0, sizeof(b));                                                          \
                if (decode(body, &a) != 0)                                                         \
                        break;                                                                     \
                if (!jp_uuid_valid(a.kernel_id, strlen(a.kernel_id)))                              \
                        fail(#kind " accepted an invalid kernel_id");                              \
                again = encode(&a);                                                                \
                if (!again || decode(again, &b) != 0)                                              \
                        fail(#kind " does not survive encode + decode");                           \
                if (!(equal))                                                                      \
                        fail(#kind " differs after encode + decode");                              \
                json_decref(again);                                                                \
        } while (0)

static void check_all(json_t *body)
{
        check_start(body);
        CHECK_SIMPLE(hostmsg_started, hostmsg_started_decode, hostmsg_started_encode,
                     !strcmp(a.kernel_id, b.kernel_id) && a.pid == b.pid &&
                         !strcmp(a.ipc_prefix, b.ipc_prefix));
        CHECK_SIMPLE(hostmsg_failed, hostmsg_failed_decode, hostmsg_failed_encode,
                     !strcmp(a.kernel_id, b.kernel_id) && !strcmp(a.step, b.step) &&
                         a.error == b.error && !strcmp(a.message, b.message));
        CHECK_SIMPLE(hostmsg_signal, hostmsg_signal_decode, hostmsg_signal_encode,
                     !strcmp(a.kernel_id, b.kernel_id) && a.signal == b.signal);
        CHECK_SIMPLE(hostmsg_exit, hostmsg_exit_decode, hostmsg_exit_encode,
                     !strcmp(a.kernel_id, b.kernel_id) && a.pid == b.pid &&
                         a.exit_code == b.exit_code && a.signal == b.signal &&
                         !strcmp(a.reason, b.reason));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        enum hostmsg_type type;
        json_t *body = NULL;
        int rc;

        /* The transport: the input as a datagram from a peer that does not
         * use hostmsg_send. */
        if (send(fds[0], data, size, MSG_NOSIGNAL) == (ssize_t)size) {
                rc = hostmsg_recv(fds[1], &type, &body);
                if (rc == 0) {
                        if (!json_is_object(body))
                                fail("hostmsg_recv returned a body that is not an object");
                        check_all(body);
                        json_decref(body);
                } else if (rc != -EBADMSG && !(rc == -EPIPE && size == 0)) {
                        fail("unexpected hostmsg_recv error");
                }
        }

        /* The decoders alone, on the input as JSON. */
        body = json_loadb((const char *)data, size, 0, NULL);
        if (json_is_object(body))
                check_all(body);
        json_decref(body);
        return 0;
}
