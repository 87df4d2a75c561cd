/* E2B's envd, the in-sandbox service of files and processes, served by the
 * gateway: /health, /files (download, multipart upload), the filesystem
 * RPCs and the process RPCs (envd_process.c), in the Connect protocol's
 * JSON form. This file: the Connect framing they share, the files, and
 * the routes. */
#include "autoconf.h"

#include "gateway/core/http.h"
#include "gateway/e2b/e2b.h"
#include "gateway/e2b/envd.h"
#include "gateway/kernels/files.h"
#include "gateway/kernels/uploads.h"
#include "protocol/kernelspec.h"
#include "protocol/buf.h"
#include "protocol/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/xattr.h>
#include <unistd.h>

/* envd's metadata headers: X-Metadata-<key> (libwebsockets keeps names in
 * lower case). */
#define METADATA_HEADER "x-metadata-"

/* ---- Connect framing ------------------------------------------------------ */

static const struct {
        int error;
        const char *code;
        int status;
} connect_codes[] = {
        {ENOENT, "not_found", 404},           {EEXIST, "already_exists", 409},
        {ENOTDIR, "invalid_argument", 400},   {EISDIR, "invalid_argument", 400},
        {EINVAL, "invalid_argument", 400},    {ENAMETOOLONG, "invalid_argument", 400},
        {ELOOP, "invalid_argument", 400},     {EACCES, "permission_denied", 403},
        {EPERM, "permission_denied", 403},    {EROFS, "permission_denied", 403},
        {ENOSPC, "resource_exhausted", 429},  {ESRCH, "not_found", 404},
        {ENOSYS, "unimplemented", 501},       {ETIMEDOUT, "deadline_exceeded", 504},
        {E2BIG, "invalid_argument", 400},
};

/* One envelope: a flags byte, a big-endian length, the JSON. */
void envd_write_frame(struct http_request *r, unsigned char flags, json_t *msg)
{
        char *text = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
        unsigned char head[5];
        size_t len;

        json_decref(msg);
        if (!text || !r)
                goto out;
        len = strlen(text);
        head[0] = flags;
        head[1] = (unsigned char)(len >> 24);
        head[2] = (unsigned char)(len >> 16);
        head[3] = (unsigned char)(len >> 8);
        head[4] = (unsigned char)len;
        /* Both or neither: a head without its JSON would break the
         * framing of everything after it. */
        if (http_stream_pending(r) + 5 + len > r->out.max || http_stream_write(r, head, 5) < 0 ||
            http_stream_write(r, text, len) < 0) {
                static struct log_limit too_far;

                log_warn_limited(&too_far, "a command's client is too far behind; output dropped");
        }
out:
        free(text);
}

/* A unary call's error: an HTTP status and {"code", "message"}. A
 * streaming call's (stream true): 200, then an end-of-stream frame with
 * the error, which is where Connect clients look for it. */
static const char *connect_code(int error, int *status)
{
        const char *code = "internal";

        *status = 500;
        for (size_t i = 0; i < sizeof(connect_codes) / sizeof(connect_codes[0]); i++) {
                if (connect_codes[i].error == -error) {
                        code = connect_codes[i].code;
                        *status = connect_codes[i].status;
                }
        }
        return code;
}

json_t *envd_error_body(int error, const char *message)
{
        int status;

        return json_pack("{s:s, s:s}", "code", connect_code(error, &status), "message", message);
}

void envd_reply_error(struct http_request *r, bool stream, int error, const char *message)
{
        int status;
        json_t *body;

        connect_code(error, &status);
        body = envd_error_body(error, message);
        if (!stream) {
                http_reply_json(r, status, body);
                return;
        }
        http_stream_start(r, 200, CONNECT_JSON);
        envd_write_frame(r, 2, json_pack("{s:o}", "error", body));
        http_stream_end(r);
}

void envd_error(struct http_request *r, bool stream, int error, const char *fmt, ...)
{
        char message[1024];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(message, sizeof(message), fmt, ap);
        va_end(ap);
        envd_reply_error(r, stream, error, message);
}

/* A request's JSON object, nulls dropped (null means absent); NULL if it
 * is not an object. */
json_t *envd_parse_request(const char *data, size_t len)
{
        json_t *req = json_loadb(data ? data : "", len, 0, NULL);

        if (!json_is_object(req)) {
                json_decref(req);
                return NULL;
        }
        http_drop_nulls(req);
        return req;
}

/* ---- users -------------------------------------------------------------------- */

/* The user an envd request acts as: the SDKs name it in an
 * "Authorization: Basic base64(name:)" header (the RPCs) or a username
 * query parameter (/files); neither means the default, "user". */
int envd_user_of(struct http_request *r, struct e2b_sandbox *s, enum files_user *who, char *message,
                 size_t size)
{
        char value[256], arg[128] = "";
        const char *name = NULL;
        struct buf decoded;
        int rc = 0;

        buf_init(&decoded, 128);
        /* A signed URL acts as the user it was signed for, whatever
         * Authorization header comes with it. */
        if (!r->e2b_signed[0] &&
            lws_hdr_copy(r->wsi, value, sizeof(value), WSI_TOKEN_HTTP_AUTHORIZATION) > 0 &&
            strncasecmp(value, "basic ", 6) == 0) {
                char nul = '\0';

                if (buf_append_unbase64(&decoded, value + 6) < 0 ||
                    buf_append(&decoded, &nul, 1) < 0) {
                        snprintf(message, size, "the Authorization header is not base64");
                        rc = -EINVAL;
                        goto out;
                }
                decoded.data[strcspn(decoded.data, ":")] = '\0';
                name = decoded.data;
        } else if (http_query_arg(r->wsi, "username", arg, sizeof(arg)) == -E2BIG) {
                snprintf(message, size, "the username parameter is too long");
                rc = -EINVAL;
                goto out;
        } else {
                name = arg[0] ? arg : NULL;
        }
        rc = files_user_parse(e2b_box(s), name, who);
        if (rc == -EINVAL)
                snprintf(message, size, "user '%.64s' does not exist here: use 'user' or 'root'",
                         name);
        else if (rc == -EPERM)
                snprintf(message, size,
                         "user 'root' needs a sandbox with a root of its own (a gateway "
                         "running as root)");
out:
        buf_free(&decoded);
        return rc;
}

double envd_header_number(struct http_request *r, const char *name, double min, double max)
{
        char value[32];
        double v;
        char *end;

        if (lws_hdr_custom_copy(r->wsi, value, sizeof(value), name, (int)strlen(name)) <= 0)
                return 0;
        v = strtod(value, &end);
        return end != value && v >= min && v <= max ? v : 0;
}

/* The request of a streaming call is one envelope. */
json_t *envd_read_envelope(struct http_request *r)
{
        const unsigned char *p = (const unsigned char *)r->body.data;
        size_t len;

        if (r->body.len < 5)
                return NULL;
        len = (size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 | p[4];
        if ((p[0] & 1) || len != r->body.len - 5 || len > MAX_ENVELOPE)
                return NULL;
        return envd_parse_request((const char *)p + 5, len);
}

/* ---- files -------------------------------------------------------------------- */

static void filesystem_rpc(struct http_request *r, struct e2b_sandbox *s, const char *method)
{
        static const char *const unary[] = {"ListDir", "Stat", "MakeDir", "Move", "Remove", NULL};
        char full[PATH_MAX], other[PATH_MAX], message[256];
        struct sandbox *sb = e2b_box(s);
        json_t *req = NULL, *result = NULL;
        enum files_user who;
        const char *path;
        int rc;

        if (envd_watch_rpc(r, s, method))
                return;
        if (!jp_strv_contains(unary, method)) {
                envd_error(r, false, -ENOSYS,
                                   "filesystem.Filesystem/%s is not supported by Glovebox", method);
                return;
        }
        if (envd_user_of(r, s, &who, message, sizeof(message)) < 0) {
                envd_error(r, false, -EINVAL, "%s", message);
                return;
        }
        req = envd_parse_request(r->body.data, r->body.len);
        path = json_string_value(json_object_get(req, "path"));
        if (!req) {
                envd_error(r, false, -EINVAL, "the request is not a JSON object");
                goto out;
        }
        if (strcmp(method, "Move") == 0)
                path = json_string_value(json_object_get(req, "source"));
        if (!path || files_normalize(path, full, sizeof(full)) < 0) {
                envd_error(r, false, -EINVAL, "a path is needed");
                goto out;
        }
        if (strcmp(method, "ListDir") == 0) {
                /* Bounded: each level is a frame of the gateway's stack. */
                json_int_t depth = json_integer_value(json_object_get(req, "depth"));

                if (depth > ENVD_MAX_DEPTH)
                        depth = ENVD_MAX_DEPTH;

                rc = files_list(sb, who, full, depth > 0 ? (unsigned)depth : 1, &result);
                if (rc == 0)
                        result = json_pack("{s:o}", "entries", result);
        } else if (strcmp(method, "Stat") == 0) {
                rc = files_stat(sb, who, full, &result);
                if (rc == 0)
                        result = json_pack("{s:o}", "entry", result);
        } else if (strcmp(method, "MakeDir") == 0) {
                rc = files_mkdir(sb, who, full);
                if (rc == 0 && files_stat(sb, who, full, &result) == 0)
                        result = json_pack("{s:o}", "entry", result);
        } else if (strcmp(method, "Move") == 0) {
                const char *to = json_string_value(json_object_get(req, "destination"));

                rc = to && files_normalize(to, other, sizeof(other)) == 0 ? 0 : -EINVAL;
                if (rc == 0)
                        rc = files_rename(sb, who, full, other);
                if (rc == 0 && files_stat(sb, who, other, &result) == 0)
                        result = json_pack("{s:o}", "entry", result);
        } else {
                /* A path already gone is removed, as envd's os.RemoveAll. */
                rc = files_remove(sb, who, full);
                rc = rc == -ENOENT ? 0 : rc;
                result = json_object();
        }
        if (rc < 0)
                envd_error(r, false, rc, "%s: %s", full, strerror(-rc));
        else
                http_reply_json(r, 200, result ? result : json_object());
        if (rc < 0)
                json_decref(result);
out:
        json_decref(req);
}

/* The same argument a signed URL's signature was checked against. */
static bool query_path(struct http_request *r, char *out, size_t size)
{
        char arg[PATH_MAX + 1];

        return http_query_arg(r->wsi, "path", arg, sizeof(arg)) == 0 &&
               files_normalize(arg, out, size) == 0;
}

static int envd_status(int error)
{
        return error == -ENOSPC || error == -EDQUOT ? 507 : files_http_status(error);
}

/* One X-Metadata-<key> header into the metadata being read, checked as
 * envd checks it: a key and a value of printable ASCII, at most
 * FILES_METADATA_MAX bytes in all with the attributes' prefix. */
struct metadata_reading {
        json_t *metadata;
        size_t total;
        char err[256];
};

static bool printable(const char *s)
{
        for (; *s; s++) {
                if (*s < 0x20 || *s > 0x7e)
                        return false;
        }
        return true;
}

static int metadata_header(const char *name, const char *value, void *arg)
{
        struct metadata_reading *m = arg;
        const char *key = name + strlen(METADATA_HEADER);

        if (!*key)
                return 0; /* "X-Metadata-" alone names nothing: skipped, as envd does */
        m->total += strlen(FILES_METADATA_PREFIX) + strlen(key) + strlen(value);
        if (strlen(FILES_METADATA_PREFIX) + strlen(key) > XATTR_NAME_MAX)
                snprintf(m->err, sizeof(m->err), "metadata key '%.64s...' is longer than %d bytes",
                         key, (int)(XATTR_NAME_MAX - strlen(FILES_METADATA_PREFIX)));
        else if (!printable(key) || !printable(value))
                snprintf(m->err, sizeof(m->err),
                         "metadata '%.64s' has a byte that is not printable ASCII", key);
        else if (m->total > FILES_METADATA_MAX)
                snprintf(m->err, sizeof(m->err), "metadata is larger than %d bytes",
                         FILES_METADATA_MAX);
        else if (json_object_set_new(m->metadata, key, json_string(value)) < 0)
                snprintf(m->err, sizeof(m->err), "out of memory");
        return m->err[0] ? -EINVAL : 0;
}

/* The body's encoding: none, identity or gzip (envd's); -EINVAL for
 * another. */
static int body_encoding(struct http_request *r, bool *gzip, char *err, size_t errlen)
{
        char value[64] = "";

        *gzip = false;
        if (lws_hdr_total_length(r->wsi, WSI_TOKEN_HTTP_CONTENT_ENCODING) <= 0)
                return 0;
        if (lws_hdr_copy(r->wsi, value, sizeof(value), WSI_TOKEN_HTTP_CONTENT_ENCODING) < 0)
                value[0] = '?';
        if (strcasecmp(value, "gzip") == 0 || strcasecmp(value, "identity") == 0) {
                *gzip = strcasecmp(value, "gzip") == 0;
                return 0;
        }
        snprintf(err, errlen, "unsupported Content-Encoding: %.32s, supported: [gzip identity]",
                 value);
        return -EINVAL;
}

bool envd_prepare(struct http_request *r, struct e2b_sandbox *s, const char *route)
{
        char path[PATH_MAX], content_type[128] = "", err[PATH_MAX];
        struct metadata_reading m = {.metadata = json_object()};
        struct upload_options opts = {.metadata = m.metadata};
        enum files_user who;
        int rc;

        if (strcmp(route, "files") != 0 || r->method != HTTP_POST)
                goto out;
        if (envd_user_of(r, s, &who, err, sizeof(err)) < 0) {
                e2b_reply_error(r, 400, "%s", err);
                goto out;
        }
        /* Every upload sets the whole of its files' metadata: none given
         * clears what an earlier upload left (envd's WriteMetadata). */
        rc = m.metadata ? http_custom_headers(r, METADATA_HEADER, metadata_header, &m) : -ENOMEM;
        if (rc < 0) {
                e2b_reply_error(r, rc == -ENOMEM ? 500 : 400, "invalid metadata: %s",
                                m.err[0] ? m.err : "out of memory");
                goto out;
        }
        if (body_encoding(r, &opts.gzip, err, sizeof(err)) < 0) {
                e2b_reply_error(r, 400, "%s", err);
                goto out;
        }
        lws_hdr_copy(r->wsi, content_type, sizeof(content_type), WSI_TOKEN_HTTP_CONTENT_TYPE);
        rc = upload_start(r, e2b_box(s), who, query_path(r, path, sizeof(path)) ? path : NULL,
                          strncmp(content_type, "multipart/", 10) == 0, &opts, err, sizeof(err));
        if (rc < 0)
                e2b_reply_error(r, rc == -EINVAL ? 400 : envd_status(rc), "cannot write %s: %s",
                                err, strerror(-rc));
out:
        json_decref(m.metadata);
        return strcmp(route, "files") == 0 && r->method == HTTP_POST;
}

/* A file whose size says nothing (a /proc file: 0) is read to its end,
 * within FILES_UNSIZED_MAX; fd is taken over. */
static void reply_unsized(struct http_request *r, int fd, const char *path)
{
        char *data;
        size_t len;
        int rc = files_read_all(fd, FILES_UNSIZED_MAX, &data, &len);

        close(fd);
        if (rc == -EFBIG)
                e2b_reply_error(r, 413,
                                "path '%s' has no size and gives more than %d bytes: read it "
                                "with a command",
                                path, FILES_UNSIZED_MAX);
        else if (rc < 0)
                e2b_reply_error(r, envd_status(rc), "path '%s': %s", path, strerror(-rc));
        else
                http_reply_bytes(r, 200, "application/octet-stream", data ? data : "", len);
        free(data);
}

static void files_route(struct http_request *r, struct e2b_sandbox *s)
{
        char path[PATH_MAX], err[PATH_MAX];
        enum files_user who;
        struct stat st;
        json_t *written;
        int fd, rc;

        if (r->method == HTTP_POST) {
                rc = upload_finish(r, &written, err, sizeof(err));
                if (rc == -EEXIST)
                        e2b_reply_error(r, 400,
                                        "you cannot upload multiple files to the same path '%s' "
                                        "in one upload request, only the first specified file "
                                        "was uploaded",
                                        err);
                else if (rc < 0)
                        e2b_reply_error(r, envd_status(rc), "cannot write %s: %s", err,
                                        strerror(-rc));
                else if (json_array_size(written) == 0)
                        e2b_reply_error(r, 400, "no file in the request");
                else
                        http_reply_json(r, 200, json_incref(written));
                json_decref(written);
                return;
        }
        if (r->method != HTTP_GET) {
                e2b_reply_error(r, 405, "use GET or POST");
                return;
        }
        if (!query_path(r, path, sizeof(path))) {
                e2b_reply_error(r, 400, "the path parameter is missing");
                return;
        }
        if (envd_user_of(r, s, &who, err, sizeof(err)) < 0) {
                e2b_reply_error(r, 400, "%s", err);
                return;
        }
        rc = files_open_read(e2b_box(s), who, path, &fd, &st);
        if (rc == -EISDIR)
                e2b_reply_error(r, 400, "path '%s' is a directory", path);
        else if (rc == -ENOENT)
                e2b_reply_error(r, 404, "path '%s' does not exist", path);
        else if (rc < 0)
                e2b_reply_error(r, envd_status(rc), "path '%s': %s", path, strerror(-rc));
        else if (files_size_unknown(fd, &st))
                reply_unsized(r, fd, path);
        else
                http_reply_fd(r, 200, "application/octet-stream", fd, (uint64_t)st.st_size);
}

void envd_handle(struct http_request *r, struct e2b_sandbox *s, const char *route)
{
        if (strcmp(route, "health") == 0)
                http_reply_empty(r, 204);
        else if (strcmp(route, "files") == 0)
                files_route(r, s);
        else if (strncmp(route, "filesystem.Filesystem/", 22) == 0 && r->method == HTTP_POST)
                filesystem_rpc(r, s, route + 22);
        else if (strcmp(route, "process.Process/Start") == 0 && r->method == HTTP_POST)
                envd_process_start(r, s);
        else if (strncmp(route, "process.Process/", 16) == 0 && r->method == HTTP_POST)
                envd_process_rpc(r, s, route + 16);
        else
                e2b_reply_error(r, 404, "no route %s", route);
}
