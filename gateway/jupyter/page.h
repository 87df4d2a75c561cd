/* The web page: the files of static/ served at the base URL without a
 * token (the page asks for one), each with a Content-Security-Policy. */
#ifndef GLOVEBOX_PAGE_H
#define GLOVEBOX_PAGE_H

#include "gateway/core/config.h"
#include "gateway/core/http.h"

#include <stdbool.h>

/* Opens the static directory: --static-dir, else the source tree's, else
 * the installed one. Without one the page is not served (a warning), the
 * API is. Returns 0 or -errno when --static-dir names no directory. */
int page_init(const struct config *cfg);
void page_close(void);

/* Whether a path (below the base URL) is one of the page's: "" and
 * "static/...". Those routes need no token. */
bool page_route(const char *path);
/* Answers a page route. */
void page_serve(struct http_request *r);

#endif
