/* What the parts of E2B's sandboxes (e2b.h) share: their credentials and
 * routing (e2b.c), the control plane's routes and models (control.c), the
 * creation of a sandbox (create.c), and its life after: the list, its
 * timeout, pause and resume, its end (lifecycle.c). Nothing outside
 * gateway/e2b/ includes this. */
#ifndef GLOVEBOX_E2B_INTERNAL_H
#define GLOVEBOX_E2B_INTERNAL_H

#include "gateway/e2b/sandbox.h"
#include "gateway/core/http.h"
#include "protocol/hostmsg.h"
#include "protocol/ids.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define E2B_DEFAULT_TEMPLATE "code-interpreter-v1"
#define E2B_MAX_METADATA     64

struct build;

/* e2b.c: whether r carries a key in force (http_authorized's, or E2B's
 * X-API-Key), which then becomes the caller. */
bool e2b_authorized_api(struct http_request *r);
/* 429 past the key's quota, in E2B's error shape with the quota and what
 * the key holds (kernels_quota_check); takes why. */
void e2b_reply_quota(struct http_request *r, json_t *why);

/* control.c: the routes that take the API key (/v2/sandboxes...). */
void e2b_control_plane(struct http_request *r, const char *route);
/* What create and connect answer: where and how to reach the sandbox. */
json_t *e2b_created_json(const struct e2b_sandbox *s);
/* A lifetime in seconds from body's "timeout" (dflt when absent); false
 * after replying 400 when it is not a number within the server's maximum,
 * from 1 second, or from 0 when zero_ok (E2B's setTimeout(0): end now). */
bool e2b_timeout_of(struct http_request *r, json_t *body, double dflt, bool zero_ok,
                    double *seconds);

/* create.c: POST /v2/sandboxes, answered once the sandbox is ready. */
void e2b_create_sandbox(struct http_request *r);
/* envVars within its bounds, each a name and value a process can take:
 * NULL, or why not (in why). */
const char *e2b_env_vars_refusal(json_t *env, char *why, size_t size);

/* lifecycle.c. The list: s becomes its first; a sandbox by its id,
 * whichever tenant's (NULL when none). */
void e2b_sandbox_add(struct e2b_sandbox *s);
struct e2b_sandbox *e2b_find_any(const char *id);
/* Takes s off the list and ends it (its pending request answered 410);
 * frees s. */
void e2b_sandbox_kill(struct e2b_sandbox *s);
/* s ends (or pauses, as its lifecycle says) in seconds from now. */
void e2b_set_timeout(struct e2b_sandbox *s, double seconds);
/* Pauses s, answering r (NULL: its timeout) when done: with its memory
 * when memory and a checkpoint can take it, else its files. */
void e2b_pause_begin(struct e2b_sandbox *s, struct http_request *r, bool memory);
/* The parts of a pause and resume that pause_memory.c shares: the request
 * waiting for s's phase (set, taken), the end of what runs in s, a pause
 * of s's files (0 or -errno; e2b_pause_saved follows), a pause's end
 * (status 0: recorded, stopped, answered), why s's last pause kept files
 * only, a resume that failed (s paused again) and one done (s runs). */
void e2b_pending_set(struct e2b_sandbox *s, struct http_request *r);
struct http_request *e2b_pending_take(struct e2b_sandbox *s);
void e2b_sandbox_stop(struct e2b_sandbox *s);
int e2b_pause_files(struct e2b_sandbox *s);
void e2b_pause_saved(struct e2b_sandbox *s, int status, const char *message, uint64_t bytes);
const char *e2b_pause_notice(const struct e2b_sandbox *s);
void e2b_resume_failed(struct e2b_sandbox *s, const char *message);
void e2b_resumed(struct e2b_sandbox *s);

/* pause_memory.c: pausing with the memory. Starts the checkpoint of s's
 * box and kernels (0; e2b_pause_saved follows), or -errno when none can be
 * made, s->pause_notice then saying why. */
int e2b_memory_pause(struct e2b_sandbox *s);
/* Lets go of what s's checkpoint was recorded with (its name, contexts
 * and commands); the checkpoint itself stays on disk. */
void e2b_memory_drop(struct e2b_sandbox *s);
/* Restores s from its checkpoint: its box, its contexts and their kernels
 * (0; e2b_resumed or e2b_resume_failed follows), or -errno. */
int e2b_memory_resume(struct e2b_sandbox *s);
/* Resumes paused s for r: a new box and kernel under the same id, its
 * files put back, answered 201 once it runs. */
void e2b_resume_begin(struct e2b_sandbox *s, struct http_request *r, double timeout);
/* The kernelspec of template tid, as create finds it; NULL if none. */
const struct jp_kernelspec *e2b_template_spec(const char *tid);
/* The built template s is of (builds.h), or NULL. */
const struct build *e2b_built_of(const struct e2b_sandbox *s);
/* s's box: of its template, and of its layers when it is a built one,
 * whose start command starts in it. 0 or -errno. */
int e2b_box_new(struct e2b_sandbox *s, const struct jp_kernelspec *spec,
                const struct hostmsg_limits *limits, const struct hostmsg_network *net);
/* Applies s's public ports and request Host to its box (at create and at
 * every resume), or to box. */
void e2b_set_public_traffic(struct e2b_sandbox *s);
void e2b_traffic_of(const struct e2b_sandbox *s, struct sandbox *box);
/* The sandbox's sudo service, on its box just made. */
void e2b_start_sudo(struct e2b_sandbox *s);
/* Answers r (a create, a resume or a connect that resumed) with s's
 * model, its sudo service started or starting (sudo waits for it). */
void e2b_reply_created(struct e2b_sandbox *s, struct http_request *r);

/* wake.c: autoResume. Whether s sleeps and a request on its plane wakes
 * it (paused or on the way to it or back, its key still there). */
bool e2b_wakeable(const struct e2b_sandbox *s);
/* Holds r, a request on the plane of wakeable s, until s runs, then gives
 * it to go (as its caller); answers 502 if it does not, in a bounded time. */
void e2b_wake_request(struct e2b_sandbox *s, struct http_request *r,
                      void (*go)(struct http_request *r));
/* s's phase changed (lifecycle.c): its waiters go on once it runs, fail
 * with error when it stays paused for that, and make a paused one resume
 * otherwise. */
void e2b_wake_settle(struct e2b_sandbox *s, const char *error);
/* s goes away: every waiter fails with error. */
void e2b_wake_end(struct e2b_sandbox *s, const char *error);
/* kernels/sandboxes.h's names that sleep: e2b.c's e2b_names. */
bool e2b_name_asleep(const char *name, struct sandbox *shape, const char **owner);
int e2b_name_wake(const char *name, struct sandbox_wake *w);
void e2b_name_wake_cancel(struct sandbox_wake *w);

#endif
