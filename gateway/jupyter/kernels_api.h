/* The REST API: routes a complete request to its handler, which answers
 * through http_reply_* now or later. */
#ifndef GLOVEBOX_API_H
#define GLOVEBOX_API_H

#include "gateway/core/http.h"

/* At the headers: a route may set r->body_fn to take the body as it comes,
 * or answer at once. */
void api_prepare(struct http_request *r);
/* Once the body is read (or streamed to body_fn). */
void api_handle(struct http_request *r);

/* Shared by the API's modules. */

/* Removes every member whose value is null from the object v and the
 * objects within it: clients (the E2B Python SDK among them) send null for
 * an optional field they leave unset, which means the same as leaving it
 * out. */
void api_drop_nulls(json_t *v);
/* The request body as a JSON object, nulls dropped; NULL after replying
 * 400. */
json_t *api_parse_body(struct http_request *r);
/* Starts a kernel as {"name"?, "template"?, "env"?, "limits"?} in request asks; done
 * hears when it is ready. Returns 0, or a negative errno after replying
 * with the error. */
int api_start_kernel(struct http_request *r, json_t *request,
                     waiter_fn done,
                     struct kernel **out);
/* Starts a kernel of ks as a request asking for nothing else would get
 * one: its kernelspec's environment, the default limits, no network, from
 * the warm pool when it has one ready. w, if given, hears when it is
 * ready. 0, -EAGAIN at --max-kernels, or -errno. */
int api_start_plain_kernel(const struct jp_kernelspec *ks, struct waiter *w,
                           struct kernel **out);
/* The file routes of a kernel (api_files.c): true when r was one. */
bool api_files_prepare(struct http_request *r);
bool api_files_handle(struct http_request *r);
/* POST /api/kernels/{id}/execute. */
void api_execute(struct http_request *r, struct kernel *k);
/* Maps a file operation's -errno to an HTTP status. */
int files_http_status(int error);
/* /api/sessions and /api/sessions/{id}. */
void api_sessions_handle(struct http_request *r, const char *id);
/* Restart and keep (gateway/kernels/keep.h): the ready /api/sessions as JSON (the
 * caller's), and taking them back once their kernels are re-adopted (one
 * whose kernel was not kept is dropped). */
json_t *api_sessions_keep_record(void);
void api_sessions_adopt(json_t *list);

#endif
