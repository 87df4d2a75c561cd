/* Request bodies written into a sandbox's files as they arrive: a raw body
 * to one file, or a multipart/form-data body to one file per part. Used by
 * Glovebox's file routes and by E2B's envd /files. */
#ifndef GLOVEBOX_UPLOADS_H
#define GLOVEBOX_UPLOADS_H

#include "gateway/kernels/files.h"
#include "gateway/core/http.h"
#include "gateway/kernels/sandboxes.h"

#include <jansson.h>

/* What E2B's uploads add (NULL options: neither). */
struct upload_options {
        /* Each file's metadata once written ({key: value}, checked; empty:
         * none, replacing what the file had); NULL: left as it is. */
        json_t *metadata;
        bool gzip; /* the body is gzip (Content-Encoding: gzip) */
};

/* Starts taking r's body into sb, as who: into path when the body is raw, or, for
 * multipart, into each part's filename unless path (when given) names the
 * only target. Sets r->body_fn, r->ctx and r->cleanup. On failure returns
 * -errno with the failing path in err. */
int upload_start(struct http_request *r, struct sandbox *sb, enum files_user who, const char *path,
                 bool multipart, const struct upload_options *opts, char *err, size_t errlen);
/* After the body: the files written, as E2B's [{name, type, path,
 * metadata?}]; or -errno (and the path in err) when a write failed (a
 * gzip body that is not one, or cut short: -EBADMSG; a second part for
 * the one path: -EEXIST). */
int upload_finish(struct http_request *r, json_t **written, char *err, size_t errlen);

#endif
