/* Template builds: E2B's v3 template API (Template.build and its SDK
 * calls) served by Glovebox.
 *
 * A tenant's template has an alias, an id and builds; a ready build is a
 * stack of read-only layers (kernel-host/layers.h) over its base: the
 * host's /usr (E2B's "base" and code-interpreter templates, the image
 * e2bdev/base) or an operator's template (--template, and images mapped to
 * one with --template-image IMAGE=TEMPLATE), plus the layers of the
 * built template it was built from. A build runs its steps (commands as
 * user or root, copies of uploaded files, workdir, user, env) in a sandbox
 * of the base with the operator's egress, whose every change to its root
 * lands in a new layer; when the steps, the start command and the ready
 * check pass, the sandbox ends and its layer is sealed read-only. Then
 * E2B's Sandbox.create(ALIAS[:TAG]) starts from it, with its env, workdir
 * and start command.
 *
 * Built templates belong to the tenant whose key built them, are kept in
 * --state-dir (templates/templates.json, templates/layers, uploads in
 * templates/uploads), survive a restart and count against
 * --template-quota-mb. Builds are bounded in time, disk and number at once
 * per tenant; a failed step fails the build with its logs. */
#ifndef GLOVEBOX_BUILDS_H
#define GLOVEBOX_BUILDS_H

#include "gateway/core/config.h"
#include "gateway/core/http.h"
#include "gateway/kernels/sandboxes.h"
#include "protocol/kernelspec.h"

#include <jansson.h>
#include <stdbool.h>

struct build;

/* Reads the built templates of cfg's state directory. Templates builds are
 * off without a state directory or as an unprivileged gateway (said once).
 * 0 or -errno (logged). */
int builds_init(const struct config *cfg);
void builds_free(void);
/* The operator's templates (templates.h) and images named here: an
 * image's template ("" for the host's), or NULL when none is mapped. */
const char *builds_image_template(const char *image);

/* Uploads of the files a build copies come to a signed URL under /e2b
 * (template-uploads/...), without an API key: the signature is the
 * credential. Each takes the route below /e2b/ and returns whether it is
 * an upload's. At the headers: admitted (true in *ok) or refused
 * (answered, *ok false). Then its body is taken as it comes, to a file of
 * the tenant's within --template-upload-max-mb. Once read: stored. */
bool builds_upload_admit(struct http_request *r, const char *route, bool *ok);
bool builds_upload_prepare(struct http_request *r, const char *route);
bool builds_upload_handle(struct http_request *r, const char *route);
/* The control plane's template routes (templates..., v2/templates...,
 * v3/templates): true when route is one of them (answered). */
bool builds_handle(struct http_request *r, const char *route);

/* The ready build name (alias, alias:tag or template id) selects for the
 * caller, or NULL. */
const struct build *builds_find(const char *name);
/* The base's kernelspec for sandboxes of b. */
const struct jp_kernelspec *builds_kernel(const struct build *b);
/* Asks for a sandbox of b (its layers over its base) with limits,
 * network and volumes ("UUID:/path", NULL: none). As sandbox_new. */
int builds_sandbox_new(const struct build *b, const struct hostmsg_limits *limits,
                       const struct hostmsg_network *network, char *const *volumes,
                       struct sandbox **out);
/* What the template sets for its sandboxes: its env (borrowed), the
 * workdir of its commands ("" for the home), its start command (NULL for
 * none), run as its user (true: root) in its workdir when the sandbox is
 * made. */
json_t *builds_env(const struct build *b);
const char *builds_workdir(const struct build *b);
const char *builds_start_cmd(const struct build *b, bool *as_root);
/* Starts b's start command (if it has one) in sb, a sandbox of b, in the
 * background: as its user, in its workdir, with its env. 0 or -errno. */
int builds_start(const struct build *b, struct sandbox *sb);

#endif
