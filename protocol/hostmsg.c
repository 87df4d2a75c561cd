#include "autoconf.h"

#include "protocol/hostmsg.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

struct hostmsg_header {
        uint32_t type;
        uint32_t length;
};

int hostmsg_send(int fd, enum hostmsg_type type, json_t *body)
{
        struct hostmsg_header h = {.type = (uint32_t)type};
        struct iovec iov[2];
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
        char *text = json_dumps(body, JSON_COMPACT);
        ssize_t n;
        int rc = 0;

        if (!text)
                return -ENOMEM;
        h.length = (uint32_t)strlen(text);
        if (h.length > HOSTMSG_MAX_BODY) {
                rc = -EMSGSIZE;
                goto out;
        }
        iov[0] = (struct iovec){&h, sizeof(h)};
        iov[1] = (struct iovec){text, h.length};
        do {
                n = sendmsg(fd, &mh, MSG_NOSIGNAL);
        } while (n < 0 && errno == EINTR);
        if (n < 0)
                rc = -errno;
out:
        free(text);
        return rc;
}

int hostmsg_recv(int fd, enum hostmsg_type *type, json_t **body)
{
        static char data[sizeof(struct hostmsg_header) + HOSTMSG_MAX_BODY];
        struct hostmsg_header h;
        ssize_t n;

        *body = NULL;
        do {
                /* MSG_TRUNC reports the real size of an oversized datagram. */
                n = recv(fd, data, sizeof(data), MSG_DONTWAIT | MSG_TRUNC);
        } while (n < 0 && errno == EINTR);
        if (n < 0)
                return errno == EAGAIN || errno == EWOULDBLOCK ? -EAGAIN : -errno;
        if (n == 0)
                return -EPIPE;
        if ((size_t)n < sizeof(h) || (size_t)n > sizeof(data))
                return -EBADMSG;
        memcpy(&h, data, sizeof(h));
        if (h.length != (size_t)n - sizeof(h))
                return -EBADMSG;
        *body = json_loadb(data + sizeof(h), h.length, 0, NULL);
        if (!json_is_object(*body)) {
                json_decref(*body);
                *body = NULL;
                return -EBADMSG;
        }
        *type = (enum hostmsg_type)h.type;
        return 0;
}

/* Copies a string member into out; -EBADMSG when missing, not a string,
 * containing NUL, or not fitting. */
static int get_str(json_t *o, const char *key, char *out, size_t size)
{
        json_t *v = json_object_get(o, key);
        size_t len;

        if (!json_is_string(v))
                return -EBADMSG;
        len = json_string_length(v);
        if (len >= size || strlen(json_string_value(v)) != len)
                return -EBADMSG;
        memcpy(out, json_string_value(v), len + 1);
        return 0;
}

static int get_int(json_t *o, const char *key, long long min, long long max, long long *out)
{
        json_t *v = json_object_get(o, key);

        if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
                return -EBADMSG;
        *out = json_integer_value(v);
        return 0;
}

static int get_id(json_t *o, char id[JP_UUID_SIZE])
{
        int rc = get_str(o, "kernel_id", id, JP_UUID_SIZE);

        if (rc == 0 && !jp_uuid_valid(id, strlen(id)))
                rc = -EBADMSG;
        return rc;
}

static json_t *strv_encode(char *const *v)
{
        json_t *a = json_array();

        for (size_t i = 0; a && v && v[i]; i++)
                json_array_append_new(a, json_string(v[i]));
        return a;
}

static int strv_decode(json_t *a, size_t max, int need_equals, char ***out)
{
        size_t n = json_array_size(a);
        json_t *v;
        size_t i;

        *out = NULL;
        if (!json_is_array(a) || n > max)
                return -EBADMSG;
        *out = calloc(n + 1, sizeof(char *));
        if (!*out)
                return -ENOMEM;
        json_array_foreach(a, i, v) {
                const char *s = json_string_value(v);

                if (!s || json_string_length(v) > HOSTMSG_MAX_STRING ||
                    strlen(s) != json_string_length(v) || (need_equals && !strchr(s, '=')))
                        return -EBADMSG;
                (*out)[i] = strdup(s);
                if (!(*out)[i])
                        return -ENOMEM;
        }
        return 0;
}

json_t *hostmsg_start_encode(const struct hostmsg_start *m)
{
        return json_pack("{s:s, s:s, s:s, s:o, s:o, s:{s:I, s:I, s:I, s:I}, s:b}", "kernel_id",
                         m->kernel_id, "kernelspec_dir", m->kernelspec_dir, "key", m->key, "argv",
                         strv_encode(m->argv), "env", strv_encode(m->env), "limits", "memory_mb",
                         (json_int_t)m->limits.memory_mb, "cpu_millis",
                         (json_int_t)m->limits.cpu_millis, "pids", (json_int_t)m->limits.pids,
                         "disk_mb", (json_int_t)m->limits.disk_mb, "sandbox", m->sandbox);
}

int hostmsg_start_decode(json_t *body, struct hostmsg_start *m)
{
        json_t *limits = json_object_get(body, "limits");
        json_t *sandbox = json_object_get(body, "sandbox");
        long long memory = 0, cpu = 0, pids = 0, disk = 0;
        int rc;

        memset(m, 0, sizeof(*m));
        rc = get_id(body, m->kernel_id);
        if (rc == 0)
                rc = get_str(body, "kernelspec_dir", m->kernelspec_dir, sizeof(m->kernelspec_dir));
        if (rc == 0)
                rc = get_str(body, "key", m->key, sizeof(m->key));
        if (rc == 0)
                rc = strv_decode(json_object_get(body, "argv"), HOSTMSG_MAX_ARGS, 0, &m->argv);
        if (rc == 0 && !m->argv[0])
                rc = -EBADMSG;
        if (rc == 0)
                rc = strv_decode(json_object_get(body, "env"), HOSTMSG_MAX_ENV, 1, &m->env);
        if (rc == 0 && (!json_is_object(limits) || !json_is_boolean(sandbox)))
                rc = -EBADMSG;
        if (rc == 0)
                rc = get_int(limits, "memory_mb", 1, 1 << 24, &memory);
        if (rc == 0)
                rc = get_int(limits, "cpu_millis", 1, 1 << 20, &cpu);
        if (rc == 0)
                rc = get_int(limits, "pids", 1, 1 << 22, &pids);
        if (rc == 0)
                rc = get_int(limits, "disk_mb", 1, 1 << 24, &disk);
        if (rc < 0) {
                hostmsg_start_clear(m);
                return rc;
        }
        m->limits = (struct hostmsg_limits){(uint64_t)memory, (uint32_t)cpu, (uint32_t)pids,
                                            (uint64_t)disk};
        m->sandbox = json_is_true(sandbox);
        return 0;
}

static void strv_clear(char ***v)
{
        for (size_t i = 0; *v && (*v)[i]; i++)
                free((*v)[i]);
        free(*v);
        *v = NULL;
}

void hostmsg_start_clear(struct hostmsg_start *m)
{
        strv_clear(&m->argv);
        strv_clear(&m->env);
}

json_t *hostmsg_started_encode(const struct hostmsg_started *m)
{
        return json_pack("{s:s, s:i, s:s}", "kernel_id", m->kernel_id, "pid", m->pid,
                         "ipc_prefix", m->ipc_prefix);
}

int hostmsg_started_decode(json_t *body, struct hostmsg_started *m)
{
        long long pid = 0;
        int rc = get_id(body, m->kernel_id);

        if (rc == 0)
                rc = get_int(body, "pid", 1, INT_MAX, &pid);
        if (rc == 0)
                rc = get_str(body, "ipc_prefix", m->ipc_prefix, sizeof(m->ipc_prefix));
        if (rc == 0)
                m->pid = (int)pid;
        return rc;
}

json_t *hostmsg_failed_encode(const struct hostmsg_failed *m)
{
        return json_pack("{s:s, s:s, s:i, s:s}", "kernel_id", m->kernel_id, "step", m->step,
                         "error", m->error, "message", m->message);
}

int hostmsg_failed_decode(json_t *body, struct hostmsg_failed *m)
{
        long long error = 0;
        int rc = get_id(body, m->kernel_id);

        if (rc == 0)
                rc = get_str(body, "step", m->step, sizeof(m->step));
        if (rc == 0)
                rc = get_int(body, "error", 0, 4095, &error);
        if (rc == 0)
                rc = get_str(body, "message", m->message, sizeof(m->message));
        if (rc == 0)
                m->error = (int)error;
        return rc;
}

json_t *hostmsg_signal_encode(const struct hostmsg_signal *m)
{
        /* STOP carries no signal, and its decoder refuses "signal": 0. */
        if (m->signal == 0)
                return json_pack("{s:s}", "kernel_id", m->kernel_id);
        return json_pack("{s:s, s:i}", "kernel_id", m->kernel_id, "signal", m->signal);
}

int hostmsg_signal_decode(json_t *body, struct hostmsg_signal *m)
{
        long long sig = 0;
        int rc = get_id(body, m->kernel_id);

        /* STOP carries no signal; SIGNAL must name a real one. */
        if (rc == 0 && json_object_get(body, "signal"))
                rc = get_int(body, "signal", 1, 64, &sig);
        m->signal = (int)sig;
        return rc;
}

json_t *hostmsg_exit_encode(const struct hostmsg_exit *m)
{
        return json_pack("{s:s, s:i, s:i, s:i, s:s}", "kernel_id", m->kernel_id, "pid", m->pid,
                         "exit_code", m->exit_code, "signal", m->signal, "reason", m->reason);
}

int hostmsg_exit_decode(json_t *body, struct hostmsg_exit *m)
{
        long long pid = 0, code = 0, sig = 0;
        int rc = get_id(body, m->kernel_id);

        if (rc == 0)
                rc = get_int(body, "pid", 0, INT_MAX, &pid);
        if (rc == 0)
                rc = get_int(body, "exit_code", -1, 255, &code);
        if (rc == 0)
                rc = get_int(body, "signal", 0, 64, &sig);
        if (rc == 0)
                rc = get_str(body, "reason", m->reason, sizeof(m->reason));
        if (rc == 0) {
                m->pid = (int)pid;
                m->exit_code = (int)code;
                m->signal = (int)sig;
        }
        return rc;
}
