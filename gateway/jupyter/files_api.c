/* Glovebox's own routes for agents and curl: a cell run over HTTP, and the
 * files of a kernel's sandbox.
 *   POST   /api/kernels/{id}/execute        {"code", "timeout"?} -> NDJSON
 *   GET    /api/kernels/{id}/files[/{path}] a file's bytes, or a directory's listing
 *                                           {"path", "entries": [{"name", "type": "file"|"dir"|
 *                                           "symlink", "path", "size", ...}]}
 *   PUT    /api/kernels/{id}/files/{path}   the body becomes the file
 *   DELETE /api/kernels/{id}/files/{path}
 * {path} is relative to /home/user; ?path= names any path instead. */
#include "autoconf.h"

#include "gateway/jupyter/kernels_api.h"
#include "gateway/kernels/run.h"
#include "gateway/kernels/files.h"
#include "gateway/kernels/uploads.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


/* Splits "api/kernels/{id}/files[/rest]" into the kernel and the file's
 * path (already normalized); NULL kernel when the route is something else. */
static struct kernel *file_route(struct http_request *r, char *path, size_t size, bool *is_files)
{
        static const char prefix[] = "api/kernels/";
        const char *id = r->path + strlen(prefix), *rest;
        char query[PATH_MAX + 8], kid[JP_UUID_SIZE];
        const char *q;

        *is_files = false;
        if (strncmp(r->path, prefix, strlen(prefix)) != 0 || strlen(id) < 36 + 6 ||
            strncmp(id + 36, "/files", 6) != 0 || (id[42] && id[42] != '/'))
                return NULL;
        *is_files = true;
        memcpy(kid, id, 36);
        kid[36] = '\0';
        rest = id[42] ? id + 43 : "";
        q = lws_get_urlarg_by_name(r->wsi, "path=", query, sizeof(query));
        if (files_normalize(q ? q : *rest ? rest : ".", path, size) < 0)
                path[0] = '\0';
        return kernel_find(kid);
}

static struct sandbox *ready_sandbox(struct http_request *r, struct kernel *k)
{
        if (!k->sandbox || k->sandbox->phase != SANDBOX_READY) {
                http_reply_error(r, 409, "The kernel's sandbox is not ready");
                return NULL;
        }
        return k->sandbox;
}

void jupyter_files_prepare(struct http_request *r)
{
        char path[PATH_MAX], err[PATH_MAX];
        struct sandbox *sb;
        bool is_files;
        struct kernel *k = file_route(r, path, sizeof(path), &is_files);
        int rc;

        if (!is_files || r->method != HTTP_PUT)
                return;
        if (!k) {
                http_reply_error(r, 404, "No such kernel");
                return;
        }
        sb = ready_sandbox(r, k);
        if (!sb)
                return;
        if (!path[0] || strcmp(path, FILES_HOME) == 0) {
                http_reply_error(r, 400, "PUT needs a file's path");
                return;
        }
        rc = upload_start(r, sb, FILES_USER, path, false, NULL, err, sizeof(err));
        if (rc < 0)
                http_reply_error(r, files_http_status(rc), "Cannot write %s: %s", err,
                                 strerror(-rc));
        return;
}

/* files_list gives envd's EntryInfo (protobuf JSON: "FILE_TYPE_FILE", a
 * 64-bit size as a string). This route speaks the shape of its own PUT
 * and of E2B's REST file routes: "file", "dir" or "symlink", sizes as
 * numbers. */
static void plain_entries(json_t *entries)
{
        static const char *const types[][2] = {{"FILE_TYPE_FILE", "file"},
                                               {"FILE_TYPE_DIRECTORY", "dir"},
                                               {"FILE_TYPE_SYMLINK", "symlink"}};
        size_t i;
        json_t *e;

        json_array_foreach (entries, i, e) {
                const char *type = json_string_value(json_object_get(e, "type"));
                const char *size = json_string_value(json_object_get(e, "size"));

                for (size_t t = 0; type && t < sizeof(types) / sizeof(types[0]); t++) {
                        if (strcmp(type, types[t][0]) == 0) {
                                json_object_set_new(e, "type", json_string(types[t][1]));
                                break;
                        }
                }
                if (size)
                        json_object_set_new(e, "size", json_integer(strtoll(size, NULL, 10)));
        }
}

static void download(struct http_request *r, struct sandbox *sb, const char *path)
{
        struct stat st;
        json_t *entries;
        int fd, rc = files_open_read(sb, FILES_USER, path, &fd, &st);

        if (rc == -EISDIR) {
                rc = files_list(sb, FILES_USER, path, 1, &entries);
                if (rc == 0) {
                        plain_entries(entries);
                        http_reply_json(r, 200, json_pack("{s:s, s:o}", "path", path, "entries",
                                                          entries));
                        return;
                }
        }
        if (rc < 0) {
                http_reply_error(r, files_http_status(rc), "%s: %s", path, strerror(-rc));
                return;
        }
        http_reply_fd(r, 200, "application/octet-stream", fd, (uint64_t)st.st_size);
}

void jupyter_files(struct http_request *r)
{
        char path[PATH_MAX], err[PATH_MAX];
        struct sandbox *sb;
        json_t *written;
        bool is_files;
        struct kernel *k = file_route(r, path, sizeof(path), &is_files);
        int rc;

        if (!is_files) {
                http_reply_error(r, 404, "No route %s", r->path);
                return;
        }
        if (!k) {
                http_reply_error(r, 404, "No such kernel");
                return;
        }
        sb = ready_sandbox(r, k);
        if (!sb)
                return;
        if (!path[0]) {
                http_reply_error(r, 400, "Bad path");
                return;
        }
        switch (r->method) {
        case HTTP_GET:
                download(r, sb, path);
                break;
        case HTTP_PUT:
                rc = upload_finish(r, &written, err, sizeof(err));
                if (rc < 0)
                        http_reply_error(r, files_http_status(rc), "Cannot write %s: %s", err,
                                         strerror(-rc));
                else
                        http_reply_json(r, 201, json_pack("{s:o}", "files", written));
                break;
        case HTTP_DELETE:
                rc = files_remove(sb, FILES_USER, path);
                if (rc < 0)
                        http_reply_error(r, files_http_status(rc), "%s: %s", path, strerror(-rc));
                else
                        http_reply_empty(r, 204);
                break;
        default:
                http_reply_error(r, 405, "Use GET, PUT or DELETE on files");
        }
}

void api_execute(struct http_request *r, struct kernel *k)
{
        json_t *body = http_parse_body(r);
        json_t *code, *timeout;

        if (!body)
                return;
        code = json_object_get(body, "code");
        timeout = json_object_get(body, "timeout");
        if (!json_is_string(code)) {
                http_reply_error(r, 400, "\"code\" must be a string");
        } else if (timeout && (!json_is_number(timeout) || json_number_value(timeout) < 0 ||
                               !isfinite(json_number_value(timeout)))) {
                http_reply_error(r, 400, "\"timeout\" must be a number of seconds, 0 or more");
        } else {
                execute_start(r, k, json_string_value(code), NULL,
                              timeout ? json_number_value(timeout) : 0, EXECUTE_GONE_LINE);
        }
        json_decref(body);
}
