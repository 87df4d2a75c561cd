#include "autoconf.h"

#include "protocol/connfile.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const port_keys[JP_CHANNEL_COUNT] = {"shell_port", "control_port",
                                                        "stdin_port", "iopub_port", "hb_port"};

static int get_string(json_t *root, const char *key, char *out, size_t size, const char *dflt,
                      char *err, size_t errlen)
{
        json_t *v = json_object_get(root, key);
        const char *s = dflt;
        size_t len;

        if (v && !json_is_string(v)) {
                snprintf(err, errlen, "\"%s\" must be a string", key);
                return -EINVAL;
        }
        if (v)
                s = json_string_value(v);
        if (!s) {
                snprintf(err, errlen, "\"%s\" is missing", key);
                return -EINVAL;
        }
        len = strlen(s);
        if (len >= size) {
                snprintf(err, errlen, "\"%s\" is too long", key);
                return -EINVAL;
        }
        memcpy(out, s, len + 1);
        return 0;
}

int jp_connection_parse(const char *json, size_t len, struct jp_connection *out, char *err,
                        size_t errlen)
{
        json_error_t jerr;
        json_t *root;
        int rc = -EINVAL;

        memset(out, 0, sizeof(*out));
        root = json_loadb(json, len, 0, &jerr);
        if (!json_is_object(root)) {
                snprintf(err, errlen, "not a JSON object");
                goto out;
        }
        if (get_string(root, "transport", out->transport, sizeof(out->transport), "tcp", err,
                       errlen) < 0 ||
            get_string(root, "ip", out->ip, sizeof(out->ip), NULL, err, errlen) < 0 ||
            get_string(root, "key", out->key, sizeof(out->key), "", err, errlen) < 0 ||
            get_string(root, "signature_scheme", out->signature_scheme,
                       sizeof(out->signature_scheme), "hmac-sha256", err, errlen) < 0 ||
            get_string(root, "kernel_name", out->kernel_name, sizeof(out->kernel_name), "", err,
                       errlen) < 0)
                goto out;
        if (strcmp(out->transport, "tcp") != 0 && strcmp(out->transport, "ipc") != 0) {
                snprintf(err, errlen, "unknown transport");
                goto out;
        }
        if (strcmp(out->signature_scheme, "hmac-sha256") != 0) {
                snprintf(err, errlen, "unsupported signature scheme");
                goto out;
        }
        for (int i = 0; i < JP_CHANNEL_COUNT; i++) {
                json_t *v = json_object_get(root, port_keys[i]);

                if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                    json_integer_value(v) > 65535) {
                        snprintf(err, errlen, "\"%s\" must be an integer port", port_keys[i]);
                        goto out;
                }
                out->ports[i] = (int)json_integer_value(v);
        }
        rc = 0;
out:
        json_decref(root);
        return rc;
}

int jp_connection_read(const char *path, struct jp_connection *out, char *err, size_t errlen)
{
        char data[JP_CONNFILE_MAX];
        size_t len = 0;
        ssize_t n;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        int rc;

        if (fd < 0) {
                rc = -errno;
                snprintf(err, errlen, "cannot open: %s", strerror(errno));
                return rc;
        }
        while (len < sizeof(data)) {
                n = read(fd, data + len, sizeof(data) - len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                len += (size_t)n;
        }
        close(fd);
        if (len == sizeof(data)) {
                snprintf(err, errlen, "file larger than %d bytes", JP_CONNFILE_MAX);
                return -EFBIG;
        }
        return jp_connection_parse(data, len, out, err, errlen);
}

static json_t *connection_json(const struct jp_connection *conn)
{
        json_t *root = json_object();

        if (!root)
                return NULL;
        for (int i = 0; i < JP_CHANNEL_COUNT; i++)
                json_object_set_new(root, port_keys[i], json_integer(conn->ports[i]));
        json_object_set_new(root, "ip", json_string(conn->ip));
        json_object_set_new(root, "key", json_string(conn->key));
        json_object_set_new(root, "transport", json_string(conn->transport));
        json_object_set_new(root, "signature_scheme", json_string(conn->signature_scheme));
        json_object_set_new(root, "kernel_name", json_string(conn->kernel_name));
        return root;
}

char *jp_connection_dump(const struct jp_connection *conn)
{
        json_t *root = connection_json(conn);
        char *text = root ? json_dumps(root, JSON_INDENT(1) | JSON_SORT_KEYS) : NULL;

        json_decref(root);
        return text;
}

/* Writes root to fd and closes fd. */
static int dump_and_close(json_t *root, int fd)
{
        int rc = json_dumpfd(root, fd, JSON_INDENT(1) | JSON_SORT_KEYS) == 0 ? 0 : -EIO;

        if (close(fd) < 0 && rc == 0)
                rc = -errno;
        return rc;
}

int jp_connection_write(const struct jp_connection *conn, const char *path)
{
        json_t *root = connection_json(conn);
        int fd = -1;
        int rc = -ENOMEM;

        if (!root)
                return -ENOMEM;
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
                rc = -errno;
                goto out;
        }
        /* The file holds the HMAC key: an existing file keeps its old mode
         * through O_TRUNC, so narrow it before the key is written. */
        if (fchmod(fd, 0600) < 0) {
                rc = -errno;
                close(fd);
                goto out;
        }
        rc = dump_and_close(root, fd);
out:
        json_decref(root);
        return rc;
}

int jp_connection_write_at(const struct jp_connection *conn, int dirfd, const char *name,
                           uid_t uid, gid_t gid)
{
        json_t *root = connection_json(conn);
        int fd = -1;
        int rc = -ENOMEM;

        if (!root)
                return -ENOMEM;
        if (strchr(name, '/') || strcmp(name, "..") == 0 || strcmp(name, ".") == 0) {
                rc = -EINVAL;
                goto out;
        }
        /* unlinkat removes a symlink itself, never its target. */
        if (unlinkat(dirfd, name, 0) < 0 && errno != ENOENT) {
                rc = -errno;
                goto out;
        }
        fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) {
                rc = -errno;
                goto out;
        }
        /* By descriptor: whatever the name points at by now, this is the
         * file we created. Given away before the key is in it. */
        if ((uid != (uid_t)-1 || gid != (gid_t)-1) && fchown(fd, uid, gid) < 0) {
                rc = -errno;
                close(fd);
                unlinkat(dirfd, name, 0);
                goto out;
        }
        rc = dump_and_close(root, fd);
        if (rc < 0)
                unlinkat(dirfd, name, 0); /* no half-written file left */
out:
        json_decref(root);
        return rc;
}

int jp_connection_endpoint(const struct jp_connection *conn, enum jp_channel channel, char *out,
                           size_t outlen)
{
        /* ipc endpoints are path prefixes joined to the port by '-', as
         * jupyter_client and ipykernel build them. */
        char sep = strcmp(conn->transport, "ipc") == 0 ? '-' : ':';
        int n = snprintf(out, outlen, "%s://%s%c%d", conn->transport, conn->ip, sep,
                         conn->ports[channel]);

        return n < 0 || (size_t)n >= outlen ? -ENAMETOOLONG : 0;
}
