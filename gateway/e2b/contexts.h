/* E2B's code interpreter (the sandbox's port 49999): code contexts, each
 * a kernel of the sandbox, and /execute, which runs a cell in one.
 *
 * As E2B's server: a sandbox starts with a default Python context and a
 * default JavaScript one (the latter's kernel starts at its first use, so
 * a sandbox that never runs JavaScript never pays for one); the list is
 * in creation order; a run by language goes to that language's default
 * context (its oldest), made when there is none. A context's cwd must be
 * a directory the sandbox's user can enter: anything else is refused
 * before any kernel starts (400), where E2B's Python context would go on
 * in /home/user while reporting the cwd asked for. */
#ifndef GLOVEBOX_E2B_CONTEXTS_H
#define GLOVEBOX_E2B_CONTEXTS_H

#include "gateway/e2b/sandbox.h"

#define E2B_MAX_CONTEXTS 16 /* contexts with a kernel, in one sandbox */

/* Starts a kernel of spec for a new context of s; w hears when it is
 * ready. NULL with *err (-errno) when it cannot start. */
struct e2b_context *e2b_context_new(struct e2b_sandbox *s, const struct jp_kernelspec *spec,
                                    const char *language, const char *cwd, struct waiter *w,
                                    int *err);
/* What a kernel of spec in s runs with: the kernelspec's env, then s's
 * envVars, as "NAME=value" (*out, the caller's). 0 or -errno (*out NULL). */
int e2b_kernel_env(const struct e2b_sandbox *s, const struct jp_kernelspec *spec, char ***out);
/* Records k (a pooled kernel, already in s's box) as a new context of
 * s; NULL when out of memory. */
struct e2b_context *e2b_context_adopt(struct e2b_sandbox *s, struct kernel *k,
                                      const char *language);
/* A context of s as a memory checkpoint had it (pause_memory.c): its id,
 * language and cwd, and k, its restored kernel (NULL: a default one whose
 * kernel starts at its first use). NULL when out of memory. */
struct e2b_context *e2b_context_restore(struct e2b_sandbox *s, const char *id,
                                        const char *language, const char *cwd, struct kernel *k);
/* s's contexts for a checkpoint's record: [{id, language, cwd, kernel:
 * {id, kernelspec, key, ipc, env}}] (kernel absent when none runs). NULL
 * when out of memory. */
json_t *e2b_contexts_record(const struct e2b_sandbox *s);
/* Adds the defaults a sandbox has besides its Python context: the
 * JavaScript one, when a kernelspec of s serves JavaScript, with no
 * kernel yet. */
void e2b_contexts_add_defaults(struct e2b_sandbox *s);
/* Ends every context of s (their kernels) and forgets them. */
void e2b_contexts_stop(struct e2b_sandbox *s);
/* The sandbox and context whose kernel is kernel_id, or NULL. */
struct e2b_sandbox *e2b_sandbox_of_kernel(const char *kernel_id, struct e2b_context **ctx);

/* A request to s's code interpreter: /execute, /contexts... */
void e2b_code_interpreter(struct http_request *r, struct e2b_sandbox *s, const char *route);

#endif
