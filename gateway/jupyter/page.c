#include "autoconf.h"

#include "gateway/jupyter/page.h"
#include "gateway/kernels/kernels.h"
#include "protocol/buf.h"
#include "protocol/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static int static_fd = -1;

/* The page itself: its own scripts and styles only, API calls and the
 * kernel WebSocket to the gateway (CSP 'self' covers ws: to the same host),
 * images from data: and blob: URLs (outputs), frames only from frame.html.
 * No inline script anywhere, so injected markup cannot run. */
static const char page_csp[] =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; frame-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'";

/* frame.html shows a kernel's HTML output. The CSP sandbox gives it an
 * opaque origin even if opened on its own, so the output can reach neither
 * the page, its storage (the token) nor the API; only frame.js runs, and
 * the output's inline styles and data: images are allowed. */
static const char frame_csp[] =
    "sandbox allow-scripts; default-src 'none'; script-src 'self'; "
    "style-src 'unsafe-inline'; img-src data: blob:; font-src data:; base-uri 'none'; "
    "form-action 'none'";

static int open_dir(const char *path)
{
        return open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
}

int page_init(const struct config *cfg)
{
        /* From its build tree, glovebox serves the source tree's page, so
         * that an edit shows at the next reload; installed, it serves the
         * installed copy, even where the source tree it came from remains. */
        const char *candidates[] = {GLOVEBOX_SRCDIR "/static", GLOVEBOX_DATADIR "/static"};
        const size_t first = program_in_build_tree() ? 0 : 1;

        if (*cfg->static_dir) {
                static_fd = open_dir(cfg->static_dir);
                if (static_fd < 0) {
                        log_error("--static-dir %s: %s", cfg->static_dir, strerror(errno));
                        return -errno;
                }
                log_info("web page from %s", cfg->static_dir);
                return 0;
        }
        for (size_t i = first; i < sizeof(candidates) / sizeof(candidates[0]); i++) {
                static_fd = open_dir(candidates[i]);
                if (static_fd >= 0) {
                        log_info("web page from %s", candidates[i]);
                        return 0;
                }
        }
        log_warn("no static directory found: the web page is not served (see --static-dir)");
        return 0;
}

void page_close(void)
{
        if (static_fd >= 0)
                close(static_fd);
        static_fd = -1;
}

bool page_route(const char *path)
{
        return path[0] == '\0' || strncmp(path, "static/", 7) == 0;
}

static const char *content_type(const char *name)
{
        static const struct {
                const char *ext, *type;
        } types[] = {
            {".html", "text/html; charset=utf-8"},
            {".js", "text/javascript; charset=utf-8"},
            {".mjs", "text/javascript; charset=utf-8"},
            {".css", "text/css; charset=utf-8"},
            {".svg", "image/svg+xml"},
            {".png", "image/png"},
            {".ico", "image/x-icon"},
        };
        const char *dot = strrchr(name, '.');

        for (size_t i = 0; dot && i < sizeof(types) / sizeof(types[0]); i++) {
                if (strcmp(dot, types[i].ext) == 0)
                        return types[i].type;
        }
        return "application/octet-stream";
}

/* Only plain names of the directory itself, or of its vendor/ directory
 * (libraries as their authors ship them): no other '/', no leading dot. */
static bool name_ok(const char *name)
{
        if (strncmp(name, "vendor/", 7) == 0)
                name += 7;
        if (!name[0] || name[0] == '.' || strlen(name) > 64)
                return false;
        for (const char *p = name; *p; p++) {
                if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                      (*p >= '0' && *p <= '9') || *p == '.' || *p == '-' || *p == '_'))
                        return false;
        }
        return true;
}

/* "<base>" without its slash would resolve the page's relative URLs
 * against the parent: send the browser to "<base>/", query kept. */
static bool redirect_to_slash(struct http_request *r)
{
        char *uri, args[1024];
        int len;

        if (lws_http_get_uri_and_method(r->wsi, &uri, &len) < 0 || len <= 0 || uri[len - 1] == '/')
                return false;
        if (lws_hdr_copy(r->wsi, args, sizeof(args), WSI_TOKEN_HTTP_URI_ARGS) <= 0)
                args[0] = '\0';
        snprintf(r->location, sizeof(r->location), "%s%s%s", config_get()->base_url,
                 args[0] ? "?" : "", args);
        http_reply_empty(r, 302);
        return true;
}

void page_serve(struct http_request *r)
{
        const char *name = r->path[0] ? r->path + 7 : "index.html";
        struct open_how how = {.flags = O_RDONLY | O_CLOEXEC,
                               .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS};
        struct stat st;
        long fd;

        if (r->method != HTTP_GET) {
                http_reply_error(r, 405, "Use GET on the page's files");
                return;
        }
        if (!r->path[0] && redirect_to_slash(r))
                return;
        if (static_fd < 0 || !name_ok(name)) {
                http_reply_error(r, 404, "No file %s", r->path);
                return;
        }
        fd = syscall(SYS_openat2, static_fd, name, &how, sizeof(how));
        if (fd < 0 || fstat((int)fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                if (fd >= 0)
                        close((int)fd);
                http_reply_error(r, 404, "No file %s", r->path);
                return;
        }
        r->csp = strcmp(name, "frame.html") == 0 ? frame_csp : page_csp;
        http_reply_fd(r, 200, content_type(name), (int)fd, (uint64_t)st.st_size);
}
