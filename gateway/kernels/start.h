/* Starting a kernel for a request: what every family that starts kernels
 * for a client shares (Jupyter's POST /api/kernels and sessions, MCP's
 * first tool call): the request's kernelspec or template, environment,
 * limits and egress checked and refused with the reason, the tenant's
 * quota, the warm pool when the request asks for nothing it lacks. */
#ifndef GLOVEBOX_START_H
#define GLOVEBOX_START_H

#include "gateway/core/http.h"
#include "gateway/core/waiter.h"
#include "gateway/kernels/kernels.h"

#include <jansson.h>

/* Starts a kernel as {"name"?, "template"?, "env"?, "limits"?, "network"?}
 * in request asks; done hears (through r->waiter) when it is ready.
 * Returns 0, or a negative errno after replying with the error. */
int start_kernel_for_request(struct http_request *r, json_t *request, waiter_fn done,
                             struct kernel **out);
/* Starts a kernel of ks as a request asking for nothing else would get
 * one: its kernelspec's environment, the default limits, no network, from
 * the warm pool when it has one ready. w, if given, hears when it is
 * ready. 0, -EAGAIN at --max-kernels, or -errno. */
int start_plain_kernel(const struct jp_kernelspec *ks, struct waiter *w, struct kernel **out);

#endif
