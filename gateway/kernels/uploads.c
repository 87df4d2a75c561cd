#include "autoconf.h"

#include "gateway/kernels/uploads.h"
#include "gateway/kernels/files.h"
#include "protocol/log.h"
#include "protocol/multipart.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define INFLATE_PIECE (64 * 1024) /* a gzip body is written this much at a time */

struct upload {
        struct sandbox *sandbox;
        enum files_user who;
        struct multipart parts;
        bool multipart;
        char fixed[PATH_MAX]; /* the ?path= target, "" when parts name their own */
        char current[PATH_MAX];
        int fd;
        int error;            /* the first failure, -errno */
        char failed[PATH_MAX];
        json_t *written;
        json_t *metadata; /* set on each file written (upload_start's), or NULL */
        bool gzip;        /* the body is gzip: inflated as it comes */
        bool inflating;   /* z is initialised */
        bool gzip_ended;  /* the last gzip member ended */
        z_stream z;
};

static void fail(struct upload *u, const char *path, int error)
{
        if (u->error)
                return;
        u->error = error;
        snprintf(u->failed, sizeof(u->failed), "%s", path);
}

static int open_target(struct upload *u, const char *path)
{
        int rc = files_normalize(path, u->current, sizeof(u->current));

        if (rc == 0)
                rc = files_open_write(u->sandbox, u->who, u->current, &u->fd);
        if (rc < 0) {
                fail(u, path, rc);
                return rc;
        }
        return 0;
}

static int write_all(struct upload *u, const uint8_t *data, size_t len)
{
        while (len > 0) {
                ssize_t n = write(u->fd, data, len);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        fail(u, u->current, -errno);
                        return -errno;
                }
                data += n;
                len -= (size_t)n;
        }
        return 0;
}

static int close_target(struct upload *u)
{
        const char *name = strrchr(u->current, '/');
        json_t *entry, *persisted = NULL;

        if (u->fd < 0)
                return 0;
        /* After the bytes, as E2B's envd does: the file's watchers see
         * its metadata change last. */
        if (u->metadata) {
                int rc = files_write_metadata(u->sandbox, u->who, u->fd, u->metadata, &persisted);

                if (rc == -EOPNOTSUPP) {
                        static struct log_limit unsupported;

                        /* As envd: the file stays written; its entry tells
                         * that no metadata is kept. */
                        log_warn_limited(&unsupported,
                                         "a sandbox's filesystem keeps no user.* attributes "
                                         "(tmpfs before Linux 6.6): file metadata not kept");
                } else if (rc < 0) {
                        fail(u, u->current, rc);
                }
        }
        if (close(u->fd) < 0)
                fail(u, u->current, -errno);
        u->fd = -1;
        entry = json_pack("{s:s, s:s, s:s}", "name", name ? name + 1 : u->current, "type", "file",
                          "path", u->current);
        if (entry && persisted)
                json_object_set(entry, "metadata", persisted);
        json_decref(persisted);
        if (entry)
                json_array_append_new(u->written, entry);
        return u->error;
}

static int part_begin(void *arg, const char *name, const char *filename)
{
        struct upload *u = arg;

        /* ?path= names the one file of the request (as envd: every part
         * goes there, and a second is refused): a signed upload URL
         * writes its own path only, whatever its parts are called. */
        if (u->fixed[0] && json_array_size(u->written) > 0) {
                fail(u, u->fixed, -EEXIST);
                return -EEXIST;
        }
        if (u->fixed[0])
                return open_target(u, u->fixed);
        if (!filename[0]) {
                fail(u, name, -EINVAL);
                return -EINVAL;
        }
        return open_target(u, filename);
}

static int part_data(void *arg, const uint8_t *data, size_t len)
{
        return write_all(arg, data, len);
}

static int part_end(void *arg)
{
        return close_target(arg);
}

static const struct multipart_handler part_handler = {part_begin, part_data, part_end};

/* The body's bytes (inflated, when it is gzip) to the file or the parts. */
static int take(struct upload *u, const uint8_t *data, size_t len)
{
        return u->multipart ? multipart_feed(&u->parts, data, len) : write_all(u, data, len);
}

/* A gzip body, inflated a piece at a time: its size once inflated is
 * bounded by the sandbox's disk, which the files it writes fill. Members
 * after the first are read too (as Go's gzip reader does). */
static int inflate_body(struct upload *u, const uint8_t *data, size_t len)
{
        static uint8_t piece[INFLATE_PIECE];
        int rc = 0;

        u->z.next_in = (Bytef *)data;
        u->z.avail_in = (uInt)len;
        while (rc == 0) {
                size_t made;
                int z;

                if (u->gzip_ended && u->z.avail_in == 0)
                        break;
                if (u->gzip_ended) {
                        if (inflateReset(&u->z) != Z_OK)
                                return -EBADMSG;
                        u->gzip_ended = false;
                }
                u->z.next_out = piece;
                u->z.avail_out = sizeof(piece);
                z = inflate(&u->z, Z_NO_FLUSH);
                if (z != Z_OK && z != Z_STREAM_END && z != Z_BUF_ERROR)
                        return -EBADMSG;
                made = sizeof(piece) - u->z.avail_out;
                rc = made ? take(u, piece, made) : 0;
                u->gzip_ended = z == Z_STREAM_END;
                /* Everything taken in and given out: wait for more. */
                if (!u->gzip_ended && u->z.avail_in == 0 && u->z.avail_out > 0)
                        break;
                if (z == Z_BUF_ERROR && made == 0)
                        break;
        }
        return rc;
}

static int on_body(struct http_request *r, const uint8_t *data, size_t len)
{
        struct upload *u = r->ctx;
        int rc;

        if (u->error)
                return 0; /* read it away; the error is answered at the end */
        rc = u->gzip ? inflate_body(u, data, len) : take(u, data, len);
        if (rc < 0)
                fail(u, u->current[0] ? u->current : u->fixed, rc == -EBADMSG ? -EBADMSG : rc);
        return 0;
}

static void on_cleanup(struct http_request *r)
{
        struct upload *u = r->ctx;

        r->ctx = NULL;
        if (u->fd >= 0)
                close(u->fd);
        if (u->inflating)
                inflateEnd(&u->z);
        json_decref(u->metadata);
        json_decref(u->written);
        sandbox_unref(&u->sandbox);
        free(u);
}

int upload_start(struct http_request *r, struct sandbox *sb, enum files_user who, const char *path,
                 bool multipart, const struct upload_options *opts, char *err, size_t errlen)
{
        char content_type[256] = "";
        struct upload *u = calloc(1, sizeof(*u));
        int rc;

        if (!u)
                return -ENOMEM;
        u->fd = -1;
        u->multipart = multipart;
        u->written = json_array();
        u->sandbox = sandbox_ref(sb);
        u->who = who;
        snprintf(u->fixed, sizeof(u->fixed), "%s", path ? path : "");
        r->ctx = u;
        r->cleanup = on_cleanup;
        r->body_fn = on_body;
        if (opts && opts->metadata)
                u->metadata = json_incref(opts->metadata);
        if (opts && opts->gzip) {
                /* 16 + the window: a gzip header and trailer, checked. */
                u->gzip = true;
                u->inflating = inflateInit2(&u->z, 16 + MAX_WBITS) == Z_OK;
                if (!u->inflating) {
                        snprintf(err, errlen, "cannot inflate a gzip body");
                        return -ENOMEM;
                }
        }
        if (multipart) {
                lws_hdr_copy(r->wsi, content_type, sizeof(content_type),
                             WSI_TOKEN_HTTP_CONTENT_TYPE);
                rc = multipart_init(&u->parts, content_type, &part_handler, u);
                if (rc < 0)
                        snprintf(err, errlen, "not a multipart/form-data body with a boundary");
                return rc;
        }
        rc = open_target(u, path);
        if (rc < 0)
                snprintf(err, errlen, "%s", path);
        return rc;
}

int upload_finish(struct http_request *r, json_t **written, char *err, size_t errlen)
{
        struct upload *u = r->ctx;

        *written = NULL;
        if (u->gzip && !u->error && !u->gzip_ended)
                fail(u, u->current[0] ? u->current : u->fixed, -EBADMSG); /* cut short */
        if (!u->multipart)
                close_target(u);
        else if (!u->error && !u->parts.done)
                fail(u, u->fixed, -EBADMSG);
        if (u->error) {
                snprintf(err, errlen, "%s", u->failed);
                return u->error;
        }
        *written = json_incref(u->written);
        return 0;
}
