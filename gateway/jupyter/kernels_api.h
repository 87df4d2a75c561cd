/* The Jupyter Server API of kernels and kernelspecs (gateway/routes.c
 * routes each of these): what jupyter_server and Kernel Gateway answer. */
#ifndef GLOVEBOX_KERNELS_API_H
#define GLOVEBOX_KERNELS_API_H

#include "gateway/core/http.h"
#include "gateway/kernels/kernels.h"

#include <jansson.h>

/* GET /api */
void jupyter_version(struct http_request *r);
/* GET /api/status */
void jupyter_status(struct http_request *r);
/* GET /api/kernelspecs, /api/kernelspecs/{name}, /kernelspecs/{name}/{file} */
void jupyter_kernelspecs(struct http_request *r);
void jupyter_kernelspec(struct http_request *r, const char *name);
void jupyter_kernelspec_resource(struct http_request *r, const char *name, const char *file);
/* /api/kernels: GET lists (the paused ones too), POST starts one. */
void jupyter_kernels(struct http_request *r);
/* /api/kernels/{id} and /api/kernels/{id}/{action} (interrupt, restart,
 * execute, pause, resume; a paused kernel's own answers). */
void jupyter_kernel(struct http_request *r, const char *id, const char *action);
/* For another family's route below /api/kernels/{id}/ (its ports, its
 * metrics): true once a paused or pausing kernel's answer is given. */
bool jupyter_kernel_paused(struct http_request *r, const char *id, const char *action);

/* The file routes of a kernel, /api/kernels/{id}/files[/{path}]: at the
 * headers (a PUT's body is written as it comes), then once it is read. */
void jupyter_files_prepare(struct http_request *r);
void jupyter_files(struct http_request *r);
/* POST /api/kernels/{id}/execute. */
void api_execute(struct http_request *r, struct kernel *k);

/* /api/sessions and /api/sessions/{id}. */
void jupyter_sessions(struct http_request *r, const char *id);
/* Restart and keep (gateway/kernels/keep.h): the ready /api/sessions as
 * JSON (the caller's), and taking them back once their kernels are
 * re-adopted (one whose kernel was not kept is dropped). */
json_t *jupyter_sessions_keep_record(void);
void jupyter_sessions_adopt(json_t *list);

#endif
