/* The E2B-compatible API under /e2b, so that an agent written for E2B's
 * SDK (@e2b/code-interpreter) runs unchanged against Glovebox with
 *   E2B_API_URL=http://HOST:PORT/e2b  E2B_SANDBOX_URL=http://HOST:PORT/e2b
 *   E2B_API_KEY=<token>
 * (docs/e2b-protocol.md describes the protocol as the SDK speaks it).
 *
 * An E2B sandbox is one Glovebox sandbox (namespaces, limits, /home/user)
 * with one or more kernels in it ("code contexts", Python first), shell
 * commands, and a lifetime that ends at its timeout. The control plane
 * (/v2/sandboxes...) takes the API key; requests to a sandbox name it in
 * the E2b-Sandbox-Id header and carry the access token its creation
 * returned. */
#ifndef GLOVEBOX_E2B_H
#define GLOVEBOX_E2B_H

#include "gateway/core/http.h"
#include "gateway/kernels/sandboxes.h"

#include <jansson.h>
#include <stdbool.h>

#define E2B_ENVD_PORT   "49983"
#define E2B_JUPYTER_PORT "49999"
/* Sandbox metadata naming the ports reached without a token: "8000,8080". */
#define E2B_PUBLIC_PORTS_KEY "glovebox.public_ports"

struct e2b_sandbox;

/* At the headers of an /e2b request, before any of its body is read: true
 * when it carries the credentials of its plane (the API key, or the named
 * sandbox's access token); false after replying 401 (or 502 for a sandbox
 * that is gone). */
bool e2b_admit(struct http_request *r);
/* At the headers of an /e2b request: may take the body as it comes. */
void e2b_prepare(struct http_request *r);
/* Once the body is read. */
void e2b_handle(struct http_request *r);
/* Whether key has the form of an E2B API key, "e2b_" and hex digits: the
 * E2B Python SDK refuses to send any other unless E2B_VALIDATE_API_KEY is
 * false. */
bool e2b_key_form(const char *key);
/* Lists again the sandboxes paused in the state directory (pause.h), at
 * start. */
void e2b_load_paused(void);
/* Kills every E2B sandbox (at shutdown); paused ones stay on disk. */
void e2b_shutdown(void);

/* Whether path (below the base URL) is E2B's: below e2b/, or the signed
 * file URLs' "files". */
bool e2b_route(const char *path);
/* For envd.c: the sandbox a sandbox-plane request names, after checking
 * its token (or the one its signature named, at admission); NULL after
 * replying with the error. */
struct e2b_sandbox *e2b_sandbox_of(struct http_request *r);
struct sandbox *e2b_box(struct e2b_sandbox *s);
/* The tenant whose key created s. */
const char *e2b_owner(const struct e2b_sandbox *s);
/* The ready sandbox of that id, whichever tenant's, or NULL (ports.c:
 * it checks who may reach it itself). */
struct e2b_sandbox *e2b_find_ready(const char *id);
/* Whether token is the sandbox's access token (constant time). */
bool e2b_token_ok(struct e2b_sandbox *s, const char *token);
/* The environment of the sandbox's commands and kernels (a new
 * reference): E2B's own variables (E2B_SANDBOX "true", E2B_SANDBOX_ID,
 * E2B_TEMPLATE_ID), then its template's and its envVars, which may
 * override them. NULL when out of memory. */
json_t *e2b_env(const struct e2b_sandbox *s);
/* Where its commands run when they name no cwd: its built template's
 * workdir (builds.h), "" for the home directory. */
const char *e2b_workdir(const struct e2b_sandbox *s);
/* Replies with E2B's error body {"code": status, "message"}. */
void e2b_reply_error(struct http_request *r, int status, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* Whether a sandbox's access token is the one a signature was made with. */
typedef bool (*e2b_token_match_fn)(const char *token, void *arg);
/* For envd_signed.c, at the headers of a signed request: the sandbox the
 * E2b-Sandbox-Id header names, or without one the running sandbox, whose
 * token matches; unless expired, it becomes the request's (r->e2b_signed)
 * and its owner the caller. false after replying 401 (no sandbox's, or
 * expired) or 502. */
bool e2b_admit_signed(struct http_request *r, e2b_token_match_fn match, void *arg, bool expired);

/* envd_signed.c: E2B's signed file URLs (download_url, upload_url):
 * whether r carries a signature, and its admission (the signature, its
 * path, operation, user and expiry checked as envd checks them). */
bool envd_signed(struct http_request *r);
bool envd_signed_admit(struct http_request *r);

/* envd.c: /health, /files, the filesystem and process RPCs. */
bool envd_prepare(struct http_request *r, struct e2b_sandbox *s, const char *route);
void envd_handle(struct http_request *r, struct e2b_sandbox *s, const char *route);
/* Kills the sandbox's commands (it is going away). */
void envd_forget(struct e2b_sandbox *s);
/* A pause that keeps the memory (pause_memory.c). */
/* The running commands of s, as envd_commands_restore takes them back:
 * their pids, process ids, configs, tags, stdin and time left. */
json_t *envd_commands_record(const struct e2b_sandbox *s);
/* s was checkpointed: its commands' streams are cut and their processes
 * let go of (the restore hands new pipes for them). */
void envd_commands_suspend(struct e2b_sandbox *s);
/* s is being restored: its recorded commands again, each waiting for the
 * pipes the kernel-host hands over; envd_commands_settle, once s is back,
 * ends those that got none (they had ended by the checkpoint). A fork's
 * copy (copy_of: its box's id) knows their processes by derived ids. */
void envd_commands_restore(struct e2b_sandbox *s, json_t *record, const char *copy_of);
void envd_commands_settle(struct e2b_sandbox *s);

/* Its sandbox ids, for kernels/sandboxes.h (sandboxes_set_names). */
extern const struct sandbox_names e2b_names;

#endif
