/* Snapshots of Jupyter kernels with their memory (docs/pause.md#snapshots-of-a-kernel):
 * POST /api/kernels/{id}/snapshot keeps a checkpoint of the running kernel
 * (it runs on) under an id of its own; POST /api/kernels {"snapshot": id}
 * starts a kernel from it, a copy with its own id, key and files, as many
 * times as asked; GET /api/snapshots lists the caller's, GET and DELETE
 * /api/snapshots/{id} show and remove one. Kept under --state-dir's
 * snapshots/ (beside E2B's), the owner's alone, counted in its
 * --pause-quota-mb, across restarts. */
#ifndef GLOVEBOX_SNAPSHOTS_API_H
#define GLOVEBOX_SNAPSHOTS_API_H

#include "gateway/core/http.h"
#include "gateway/kernels/kernels.h"

#include <jansson.h>

/* Reads the kept ones at start. */
void jupyter_snapshots_load(void);
/* /api/snapshots and /api/snapshots/{id}. */
void jupyter_snapshots(struct http_request *r, const char *id);
/* POST /api/kernels/{id}/snapshot. */
void jupyter_kernel_snapshot(struct http_request *r, struct kernel *k);
/* POST /api/kernels whose body names a "snapshot": true once answered
 * (now or later); false when it names none. */
bool jupyter_kernel_from_snapshot(struct http_request *r, json_t *body);

#endif
