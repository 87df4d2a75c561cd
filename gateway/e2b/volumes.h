/* E2B's volumes (docs/e2b.md#volumes): the control plane's /volumes
 * (create, list, info with the token, destroy; the caller's API key) and
 * the content API /volumecontent/{id}/file|dir|path, served under the
 * same base URL (E2B_VOLUME_API_URL is Glovebox's E2B URL), whose
 * credential is the volume's own token (Authorization: Bearer). The
 * volumes themselves are gateway/kernels/volumes.h's. */
#ifndef GLOVEBOX_E2B_VOLUMES_H
#define GLOVEBOX_E2B_VOLUMES_H

#include "gateway/core/http.h"

#include <stdbool.h>

/* Whether route is the content API's ("volumecontent/..."). */
bool e2b_volume_content_route(const char *route);
/* At the headers of a content request: whether its bearer token is the
 * volume's (else answered 401 or 404); a file's upload starts taking the
 * body. */
bool e2b_volume_content_admit(struct http_request *r, const char *route);
void e2b_volume_content_prepare(struct http_request *r, const char *route);
void e2b_volume_content(struct http_request *r, const char *route);
/* The control plane's volumes routes: whether route was one (answered). */
bool e2b_volumes_handle(struct http_request *r, const char *route);

#endif
