/* What the parts of the HTTP server (http.h) share: a request's life and
 * the reading of its body (http.c), and its answer, whole or streamed
 * (http_reply.c). Nothing outside gateway/core/http*.c includes this. */
#ifndef GLOVEBOX_HTTP_INTERNAL_H
#define GLOVEBOX_HTTP_INTERNAL_H

#include "gateway/core/http.h"

#include <libwebsockets.h>
#include <stddef.h>

/* http.c: ends what r holds (its cleanup runs, its buffers and file are
 * freed) and makes it a request not yet begun. */
void http_request_reset(struct http_request *r);

/* http_reply.c, at a writable callback. Writes the next piece of a
 * streamed response; returns what the lws callback must return. */
int http_stream_step(struct lws *wsi, struct http_request *r);
/* Writes a whole response, its headers (r's; r may be NULL for an error
 * written before there is a request) and its body: 0 or -1. */
int http_write_response(struct lws *wsi, const struct http_request *r, int status,
                        const char *content_type, unsigned char *body, size_t len);

/* http_reply.c: the route class of r (metrics.h), for the metrics and the
 * access log alike. */
const char *http_route_class(const struct http_request *r);

#endif
