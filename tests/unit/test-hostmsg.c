/* protocol/hostmsg.c: the typed messages between the gateway and the
 * kernel-host, over a real SOCK_SEQPACKET socketpair. */
#include "autoconf.h"

#include "protocol/hostmsg.h"
#include "tests/unit/tap.h"

#include <errno.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

static int fds[2];

static const char kid[] = "1b4e28ba-2fa1-41d2-883f-0016d3cca427";

/* Sends body as type on fds[0], receives it on fds[1]; returns the received
 * body (caller decrefs) or NULL. */
static json_t *transfer(enum hostmsg_type type, json_t *body, const char *name)
{
        enum hostmsg_type got = 0;
        json_t *back = NULL;

        ok(body != NULL, "%s: encodes", name);
        is_int(hostmsg_send(fds[0], type, body), 0, "%s: sends", name);
        is_int(hostmsg_recv(fds[1], &got, &back), 0, "%s: receives", name);
        is_int(got, type, "%s: type survives", name);
        json_decref(body);
        return back;
}

static void test_start(void)
{
        char *argv[] = {"/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}",
                        "ünïcode",          NULL};
        char *env[] = {"PATH=/usr/bin:/bin", "EMPTY=", "A=b=c", NULL};
        struct hostmsg_start m = {0}, back;
        json_t *body;
        size_t n;

        memcpy(m.kernel_id, kid, sizeof(kid));
        snprintf(m.kernelspec_dir, sizeof(m.kernelspec_dir), "/usr/share/jupyter/kernels/python3");
        snprintf(m.key, sizeof(m.key), "0123456789abcdef0123456789abcdef");
        m.argv = argv;
        m.env = env;
        m.limits = (struct hostmsg_limits){
            .memory_mb = 1024, .cpu_millis = 1500, .pids = 256, .disk_mb = 1 << 24};
        m.sandbox = true;

        body = transfer(HOSTMSG_START, hostmsg_start_encode(&m), "START");
        memset(&back, 0x5a, sizeof(back));
        is_int(hostmsg_start_decode(body, &back), 0, "START: decodes");
        is_str(back.kernel_id, kid, "START: kernel_id");
        is_str(back.kernelspec_dir, m.kernelspec_dir, "START: kernelspec_dir");
        is_str(back.key, m.key, "START: key");
        for (n = 0; back.argv && back.argv[n]; n++)
                ;
        is_uint(n, 6, "START: argv length");
        for (size_t i = 0; i < n && i < 6; i++)
                is_str(back.argv[i], argv[i], "START: argv[%zu]", i);
        for (n = 0; back.env && back.env[n]; n++)
                ;
        is_uint(n, 3, "START: env length");
        for (size_t i = 0; i < n && i < 3; i++)
                is_str(back.env[i], env[i], "START: env[%zu]", i);
        is_uint(back.limits.memory_mb, 1024, "START: memory_mb");
        is_uint(back.limits.cpu_millis, 1500, "START: cpu_millis");
        is_uint(back.limits.pids, 256, "START: pids");
        is_uint(back.limits.disk_mb, 1 << 24, "START: disk_mb at its maximum");
        is_int(back.sandbox, true, "START: sandbox");
        hostmsg_start_clear(&back);
        ok(back.argv == NULL && back.env == NULL, "START: clear releases argv and env");
        hostmsg_start_clear(&back);
        json_decref(body);

        m.sandbox = false;
        m.env = (char *[]){NULL};
        body = transfer(HOSTMSG_START, hostmsg_start_encode(&m), "START without env");
        is_int(hostmsg_start_decode(body, &back), 0, "START without env: decodes");
        ok(back.env && back.env[0] == NULL && back.sandbox == false,
           "START without env: empty env, no sandbox");
        hostmsg_start_clear(&back);
        json_decref(body);
}

static void test_replies(void)
{
        struct hostmsg_started st = {.pid = 4242}, st2;
        struct hostmsg_failed fl = {.error = ENOENT}, fl2;
        struct hostmsg_signal sg = {.signal = SIGINT}, sg2;
        struct hostmsg_exit ex = {.pid = 4242, .exit_code = -1, .signal = SIGKILL}, ex2;
        json_t *body;

        memcpy(st.kernel_id, kid, sizeof(kid));
        snprintf(st.ipc_prefix, sizeof(st.ipc_prefix), "/run/glovebox/%s/kernel", kid);
        body = transfer(HOSTMSG_STARTED, hostmsg_started_encode(&st), "STARTED");
        memset(&st2, 0, sizeof(st2));
        is_int(hostmsg_started_decode(body, &st2), 0, "STARTED: decodes");
        ok(strcmp(st2.kernel_id, kid) == 0 && st2.pid == 4242 &&
               strcmp(st2.ipc_prefix, st.ipc_prefix) == 0,
           "STARTED: every field");
        json_decref(body);

        memcpy(fl.kernel_id, kid, sizeof(kid));
        snprintf(fl.step, sizeof(fl.step), "exec");
        snprintf(fl.message, sizeof(fl.message), "execve /usr/bin/python3: \"quoted\" ünï");
        body = transfer(HOSTMSG_START_FAILED, hostmsg_failed_encode(&fl), "START_FAILED");
        memset(&fl2, 0, sizeof(fl2));
        is_int(hostmsg_failed_decode(body, &fl2), 0, "START_FAILED: decodes");
        ok(strcmp(fl2.kernel_id, kid) == 0 && strcmp(fl2.step, "exec") == 0 &&
               fl2.error == ENOENT && strcmp(fl2.message, fl.message) == 0,
           "START_FAILED: every field");
        json_decref(body);

        memcpy(sg.kernel_id, kid, sizeof(kid));
        body = transfer(HOSTMSG_SIGNAL, hostmsg_signal_encode(&sg), "SIGNAL");
        memset(&sg2, 0, sizeof(sg2));
        is_int(hostmsg_signal_decode(body, &sg2), 0, "SIGNAL: decodes");
        ok(strcmp(sg2.kernel_id, kid) == 0 && sg2.signal == SIGINT, "SIGNAL: every field");
        json_decref(body);

        /* STOP carries only the kernel id. */
        body = transfer(HOSTMSG_STOP, json_pack("{s:s}", "kernel_id", kid), "STOP");
        sg2.signal = 99;
        is_int(hostmsg_signal_decode(body, &sg2), 0, "STOP: decodes");
        ok(strcmp(sg2.kernel_id, kid) == 0 && sg2.signal == 0, "STOP: no signal");
        json_decref(body);

        /* The same encoder serves STOP: signal 0 must not be sent as a
         * signal the decoder refuses. */
        sg.signal = 0;
        body = transfer(HOSTMSG_STOP, hostmsg_signal_encode(&sg), "STOP via hostmsg_signal_encode");
        sg2.signal = 99;
        is_int(hostmsg_signal_decode(body, &sg2), 0, "STOP via hostmsg_signal_encode: decodes");
        ok(strcmp(sg2.kernel_id, kid) == 0 && sg2.signal == 0,
           "STOP via hostmsg_signal_encode: no signal");
        json_decref(body);

        memcpy(ex.kernel_id, kid, sizeof(kid));
        snprintf(ex.reason, sizeof(ex.reason), "out-of-memory");
        body = transfer(HOSTMSG_EXITED, hostmsg_exit_encode(&ex), "EXITED");
        memset(&ex2, 0, sizeof(ex2));
        is_int(hostmsg_exit_decode(body, &ex2), 0, "EXITED: decodes");
        ok(strcmp(ex2.kernel_id, kid) == 0 && ex2.pid == 4242 && ex2.exit_code == -1 &&
               ex2.signal == SIGKILL && strcmp(ex2.reason, "out-of-memory") == 0,
           "EXITED: every field");
        json_decref(body);
}

/* Sends raw bytes as one datagram. */
static int send_raw(const void *data, size_t len)
{
        return send(fds[0], data, len, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -errno;
}

static void test_transport(void)
{
        enum hostmsg_type type;
        json_t *body = (json_t *)&body;
        struct {
                uint32_t type, length;
                char body[HOSTMSG_MAX_BODY + 16];
        } *raw = calloc(1, sizeof(*raw));
        size_t hdr = 2 * sizeof(uint32_t);
        int sndbuf = 4 * HOSTMSG_MAX_BODY;
        int pair[2];
        json_t *big;
        char *filler;

        is_int(hostmsg_recv(fds[1], &type, &body), -EAGAIN, "nothing waiting: -EAGAIN");
        ok(body == NULL, "and no body");

        /* The largest datagram needs a send buffer beyond the default. */
        if (setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)) < 0)
                BAIL_OUT("SO_SNDBUF: %s", strerror(errno));

        filler = malloc(HOSTMSG_MAX_BODY + 2);
        memset(filler, 'x', HOSTMSG_MAX_BODY + 1);
        /* {"f":"xxx..."} is 8 bytes of syntax around the string. */
        filler[HOSTMSG_MAX_BODY - 8] = '\0';
        big = json_pack("{s:s}", "f", filler);
        is_int(hostmsg_send(fds[0], HOSTMSG_STARTED, big), 0,
               "a body of exactly HOSTMSG_MAX_BODY bytes is sent");
        is_int(hostmsg_recv(fds[1], &type, &body), 0, "and received");
        is_uint(json_string_length(json_object_get(body, "f")), HOSTMSG_MAX_BODY - 8, "whole");
        json_decref(body);
        json_decref(big);
        filler[HOSTMSG_MAX_BODY - 8] = 'x';
        filler[HOSTMSG_MAX_BODY - 7] = '\0';
        big = json_pack("{s:s}", "f", filler);
        is_int(hostmsg_send(fds[0], HOSTMSG_STARTED, big), -EMSGSIZE,
               "one byte more is refused by the sender");
        json_decref(big);
        free(filler);

        /* A peer that does not use hostmsg_send: oversized and malformed
         * datagrams are consumed and reported, and the next one is fine. */
        raw->type = HOSTMSG_STARTED;
        raw->length = HOSTMSG_MAX_BODY + 1;
        memset(raw->body, ' ', HOSTMSG_MAX_BODY + 1);
        raw->body[0] = '{';
        raw->body[HOSTMSG_MAX_BODY] = '}';
        is_int(send_raw(raw, hdr + HOSTMSG_MAX_BODY + 1), 0, "an oversized datagram is sent raw");
        is_int(hostmsg_recv(fds[1], &type, &body), -EBADMSG, "an oversized datagram: -EBADMSG");
        ok(body == NULL, "and no body");

        raw->length = 10;
        memcpy(raw->body, "{}", 2);
        is_int(send_raw(raw, hdr + 2), 0, "a datagram whose length field lies");
        is_int(hostmsg_recv(fds[1], &type, &body), -EBADMSG, "a lying length: -EBADMSG");
        raw->length = 2;
        is_int(send_raw(raw, hdr - 1), 0, "a datagram shorter than the header");
        is_int(hostmsg_recv(fds[1], &type, &body), -EBADMSG, "a short header: -EBADMSG");
        raw->length = 5;
        memcpy(raw->body, "{nope", 5);
        is_int(send_raw(raw, hdr + 5), 0, "a datagram that is not JSON");
        is_int(hostmsg_recv(fds[1], &type, &body), -EBADMSG, "not JSON: -EBADMSG");
        raw->length = 2;
        memcpy(raw->body, "[]", 2);
        is_int(send_raw(raw, hdr + 2), 0, "a datagram holding an array");
        is_int(hostmsg_recv(fds[1], &type, &body), -EBADMSG, "an array: -EBADMSG");
        ok(body == NULL, "and no body");
        raw->length = 2;
        memcpy(raw->body, "{}", 2);
        is_int(send_raw(raw, hdr + 2), 0, "a well-formed datagram after the bad ones");
        is_int(hostmsg_recv(fds[1], &type, &body), 0, "is received");
        is_int(type, HOSTMSG_STARTED, "with its type");
        json_decref(body);
        is_int(hostmsg_recv(fds[1], &type, &body), -EAGAIN, "every bad datagram was consumed");
        free(raw);

        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0)
                BAIL_OUT("socketpair: %s", strerror(errno));
        close(pair[0]);
        is_int(hostmsg_recv(pair[1], &type, &body), -EPIPE, "the peer is gone: -EPIPE");
        big = json_object();
        is_int(hostmsg_send(pair[1], HOSTMSG_STOP, big), -EPIPE,
               "sending to a closed peer: -EPIPE, and no SIGPIPE");
        json_decref(big);
        close(pair[1]);
}

static json_t *good_start(void)
{
        return json_pack("{s:s, s:s, s:s, s:[s], s:[s], s:{s:i, s:i, s:i, s:i}, s:b}", "kernel_id",
                         kid, "kernelspec_dir", "/k", "key", "", "argv", "python3", "env", "A=1",
                         "limits", "memory_mb", 1024, "cpu_millis", 1000, "pids", 256, "disk_mb",
                         1024, "sandbox", 1);
}

/* Applies one change to a good START body and expects it to be refused. */
static void start_refused(const char *member, json_t *value, const char *name)
{
        json_t *body = good_start();
        json_t *target = body;
        const char *key = member;
        struct hostmsg_start m;

        if (strncmp(member, "limits.", 7) == 0) {
                target = json_object_get(body, "limits");
                key = member + 7;
        }
        if (value)
                json_object_set_new(target, key, value);
        else
                json_object_del(target, key);
        m.argv = (char **)&m;
        is_int(hostmsg_start_decode(body, &m), -EBADMSG, "START refused: %s", name);
        ok(m.argv == NULL && m.env == NULL, "START refused: %s: nothing left allocated", name);
        json_decref(body);
}

static void test_start_validation(void)
{
        struct hostmsg_start m;
        json_t *body = good_start();
        json_t *many;
        char *longstr;

        is_int(hostmsg_start_decode(body, &m), 0, "the good START body decodes");
        hostmsg_start_clear(&m);
        json_decref(body);

        start_refused("kernel_id", json_string("not-a-uuid"), "kernel_id not a UUID");
        start_refused("kernel_id", json_string("1B4E28BA-2FA1-41D2-883F-0016D3CCA427"),
                      "kernel_id in uppercase");
        start_refused("kernel_id", json_string("../../../../../../../../etc/passwd.."),
                      "kernel_id a path of UUID length");
        start_refused("kernel_id", NULL, "kernel_id missing");
        start_refused("kernel_id", json_integer(1), "kernel_id a number");
        start_refused("kernelspec_dir", NULL, "kernelspec_dir missing");
        start_refused("kernelspec_dir", json_stringn("/a\0b", 4), "kernelspec_dir with a NUL");
        start_refused("key", json_null(), "key null");
        start_refused("argv", json_array(), "argv empty");
        start_refused("argv", NULL, "argv missing");
        start_refused("argv", json_string("python3"), "argv a string");
        start_refused("argv", json_pack("[s,i]", "python3", 1), "argv with a number");
        start_refused("argv", json_pack("[s,s%]", "python3", "a\0b", (size_t)3),
                      "argv with a NUL inside");
        start_refused("env", json_pack("[s]", "NOEQUALS"), "env entry without '='");
        start_refused("env", json_pack("[s,s]", "A=1", "B"), "second env entry without '='");
        start_refused("env", json_object(), "env an object");
        start_refused("env", NULL, "env missing");
        start_refused("limits", NULL, "limits missing");
        start_refused("limits", json_integer(5), "limits a number");
        start_refused("limits.memory_mb", json_integer(0), "memory_mb 0");
        start_refused("limits.memory_mb", json_integer((1 << 24) + 1), "memory_mb past 16 TiB");
        start_refused("limits.memory_mb", json_integer(-1), "memory_mb negative");
        start_refused("limits.memory_mb", json_real(1024.0), "memory_mb a float");
        start_refused("limits.cpu_millis", json_integer(0), "cpu_millis 0");
        start_refused("limits.cpu_millis", json_integer((1 << 20) + 1), "cpu_millis too large");
        start_refused("limits.pids", json_integer(0), "pids 0");
        start_refused("limits.pids", json_integer((1 << 22) + 1), "pids too large");
        start_refused("limits.disk_mb", json_integer(0), "disk_mb 0");
        start_refused("limits.disk_mb", NULL, "disk_mb missing");
        start_refused("sandbox", NULL, "sandbox missing");
        start_refused("sandbox", json_integer(1), "sandbox a number");

        longstr = malloc(PATH_MAX + 1);
        memset(longstr, 'k', PATH_MAX);
        longstr[JP_MAX_KEY_LEN + 1] = '\0';
        start_refused("key", json_string(longstr), "key one byte too long");
        longstr[JP_MAX_KEY_LEN] = '\0';
        body = good_start();
        json_object_set_new(body, "key", json_string(longstr));
        is_int(hostmsg_start_decode(body, &m), 0, "key of JP_MAX_KEY_LEN bytes");
        hostmsg_start_clear(&m);
        json_decref(body);
        memset(longstr, 'k', PATH_MAX);
        longstr[PATH_MAX] = '\0';
        start_refused("kernelspec_dir", json_string(longstr), "kernelspec_dir of PATH_MAX bytes");
        free(longstr);

        longstr = malloc(HOSTMSG_MAX_STRING + 2);
        memset(longstr, 'a', HOSTMSG_MAX_STRING + 1);
        longstr[HOSTMSG_MAX_STRING + 1] = '\0';
        start_refused("argv", json_pack("[s]", longstr), "an argv entry over HOSTMSG_MAX_STRING");
        longstr[HOSTMSG_MAX_STRING] = '\0';
        body = good_start();
        json_object_set_new(body, "argv", json_pack("[s]", longstr));
        is_int(hostmsg_start_decode(body, &m), 0, "an argv entry of HOSTMSG_MAX_STRING bytes");
        hostmsg_start_clear(&m);
        json_decref(body);
        free(longstr);

        many = json_array();
        for (int i = 0; i < HOSTMSG_MAX_ARGS + 1; i++)
                json_array_append_new(many, json_string("a"));
        start_refused("argv", many, "argv one entry too many");
        many = json_array();
        for (int i = 0; i < HOSTMSG_MAX_ENV + 1; i++)
                json_array_append_new(many, json_string("A=1"));
        start_refused("env", many, "env one entry too many");
        body = good_start();
        many = json_array();
        for (int i = 0; i < HOSTMSG_MAX_ENV; i++)
                json_array_append_new(many, json_string("A=1"));
        json_object_set_new(body, "env", many);
        is_int(hostmsg_start_decode(body, &m), 0, "env of HOSTMSG_MAX_ENV entries");
        hostmsg_start_clear(&m);
        json_decref(body);
}

static void test_reply_validation(void)
{
        struct hostmsg_started st;
        struct hostmsg_failed fl;
        struct hostmsg_signal sg;
        struct hostmsg_exit ex;
        json_t *b;

#define CHECK(decode, out, rc, name, ...)                                                          \
        do {                                                                                       \
                b = json_pack(__VA_ARGS__);                                                        \
                if (!b)                                                                            \
                        BAIL_OUT("json_pack for %s", name);                                        \
                is_int(decode(b, &out), rc, "%s", name);                                           \
                json_decref(b);                                                                    \
        } while (0)
        CHECK(hostmsg_started_decode, st, 0, "STARTED good", "{s:s,s:i,s:s}", "kernel_id", kid,
              "pid", 1, "ipc_prefix", "/run/x");
        CHECK(hostmsg_started_decode, st, -EBADMSG, "STARTED pid 0", "{s:s,s:i,s:s}", "kernel_id",
              kid, "pid", 0, "ipc_prefix", "/run/x");
        CHECK(hostmsg_started_decode, st, -EBADMSG, "STARTED pid negative", "{s:s,s:i,s:s}",
              "kernel_id", kid, "pid", -5, "ipc_prefix", "/run/x");
        CHECK(hostmsg_started_decode, st, -EBADMSG, "STARTED pid past INT_MAX", "{s:s,s:I,s:s}",
              "kernel_id", kid, "pid", (json_int_t)INT_MAX + 1, "ipc_prefix", "/run/x");
        CHECK(hostmsg_started_decode, st, -EBADMSG, "STARTED ipc_prefix missing", "{s:s,s:i}",
              "kernel_id", kid, "pid", 7);
        CHECK(hostmsg_started_decode, st, -EBADMSG, "STARTED bad kernel_id", "{s:s,s:i,s:s}",
              "kernel_id", "x", "pid", 7, "ipc_prefix", "/run/x");

        CHECK(hostmsg_failed_decode, fl, 0, "START_FAILED errno 4095", "{s:s,s:s,s:i,s:s}",
              "kernel_id", kid, "step", "clone", "error", 4095, "message", "m");
        CHECK(hostmsg_failed_decode, fl, -EBADMSG, "START_FAILED errno 4096", "{s:s,s:s,s:i,s:s}",
              "kernel_id", kid, "step", "clone", "error", 4096, "message", "m");
        CHECK(hostmsg_failed_decode, fl, -EBADMSG, "START_FAILED errno negative",
              "{s:s,s:s,s:i,s:s}", "kernel_id", kid, "step", "clone", "error", -1, "message", "m");
        CHECK(hostmsg_failed_decode, fl, -EBADMSG, "START_FAILED step too long",
              "{s:s,s:s,s:i,s:s}", "kernel_id", kid, "step",
              "0123456789012345678901234567890123456789012345678901234567890123", "error", 1,
              "message", "m");
        CHECK(hostmsg_failed_decode, fl, -EBADMSG, "START_FAILED message missing", "{s:s,s:s,s:i}",
              "kernel_id", kid, "step", "clone", "error", 1);

        CHECK(hostmsg_signal_decode, sg, 0, "SIGNAL 64", "{s:s,s:i}", "kernel_id", kid, "signal",
              64);
        CHECK(hostmsg_signal_decode, sg, -EBADMSG, "SIGNAL 0", "{s:s,s:i}", "kernel_id", kid,
              "signal", 0);
        CHECK(hostmsg_signal_decode, sg, -EBADMSG, "SIGNAL 65", "{s:s,s:i}", "kernel_id", kid,
              "signal", 65);
        CHECK(hostmsg_signal_decode, sg, -EBADMSG, "SIGNAL as a string", "{s:s,s:s}", "kernel_id",
              kid, "signal", "SIGINT");
        CHECK(hostmsg_signal_decode, sg, -EBADMSG, "SIGNAL bad kernel_id", "{s:s,s:i}", "kernel_id",
              "1b4e28ba-2fa1-41d2-883f-0016d3cca42", "signal", 2);

        CHECK(hostmsg_exit_decode, ex, 0, "EXITED code 255", "{s:s,s:i,s:i,s:i,s:s}", "kernel_id",
              kid, "pid", 9, "exit_code", 255, "signal", 0, "reason", "exited");
        CHECK(hostmsg_exit_decode, ex, -EBADMSG, "EXITED code 256", "{s:s,s:i,s:i,s:i,s:s}",
              "kernel_id", kid, "pid", 9, "exit_code", 256, "signal", 0, "reason", "exited");
        CHECK(hostmsg_exit_decode, ex, -EBADMSG, "EXITED code -2", "{s:s,s:i,s:i,s:i,s:s}",
              "kernel_id", kid, "pid", 9, "exit_code", -2, "signal", 0, "reason", "exited");
        CHECK(hostmsg_exit_decode, ex, -EBADMSG, "EXITED signal 65", "{s:s,s:i,s:i,s:i,s:s}",
              "kernel_id", kid, "pid", 9, "exit_code", -1, "signal", 65, "reason", "signaled");
        CHECK(hostmsg_exit_decode, ex, -EBADMSG, "EXITED reason too long", "{s:s,s:i,s:i,s:i,s:s}",
              "kernel_id", kid, "pid", 9, "exit_code", -1, "signal", 9, "reason",
              "0123456789012345678901234567890123");
        CHECK(hostmsg_exit_decode, ex, -EBADMSG, "EXITED reason missing", "{s:s,s:i,s:i,s:i}",
              "kernel_id", kid, "pid", 9, "exit_code", 0, "signal", 0);
#undef CHECK
}

int main(void)
{
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) < 0)
                BAIL_OUT("socketpair: %s", strerror(errno));
        test_start();
        test_replies();
        test_transport();
        test_start_validation();
        test_reply_validation();
        close(fds[0]);
        close(fds[1]);
        return done_testing();
}
