/* Pause and resume of a Jupyter kernel (POST /api/kernels/{id}/pause and
 * .../resume), the Glovebox routes beside E2B's (e2b/lifecycle.c): the kernel's
 * /home/user saved in the state directory (pause.h), the kernel and its
 * sandbox ended; a resume starts the same kernelspec under the same id,
 * with the same environment, limits and owner, and puts the files back.
 * A paused kernel is listed with "execution_state": "paused" and outlives
 * the gateway. Files only: its variables are not kept (the model's
 * "paused" object says so). */
#ifndef GLOVEBOX_KERNEL_PAUSE_H
#define GLOVEBOX_KERNEL_PAUSE_H

#include "gateway/core/http.h"

#include <jansson.h>
#include <stdbool.h>

/* Serves action ("pause", "resume", or NULL: GET or DELETE of the kernel
 * itself) for kernel id when it is paused, or being paused or resumed,
 * or when action is pause or resume: true when answered (or to be
 * answered). false: not a paused kernel's, the caller goes on. */
bool kernel_pause_route(struct http_request *r, const char *id, const char *action);
/* The models of the paused kernels the caller may reach (new). */
json_t *kernel_pause_models(void);
/* Lists again the kernels paused in the state directory, at start. */
void kernel_pause_load(void);
/* Forgets them (their state stays on disk), at shutdown. */
void kernel_pause_shutdown(void);

#endif
