#include "autoconf.h"

#include "gateway/e2b/e2b.h"
#include "gateway/e2b/builds.h"
#include "gateway/e2b/contexts.h"
#include "gateway/e2b/e2b_internal.h"
#include "gateway/e2b/volumes.h"
#include "gateway/e2b/sandbox.h"
#include "gateway/core/http.h"
#include "gateway/core/tenants.h"

#include <openssl/crypto.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static bool header(struct http_request *r, const char *name, char *out, size_t size)
{
        return lws_hdr_custom_copy(r->wsi, out, (int)size, name, (int)strlen(name)) > 0;
}

static bool token_matches(const char *given, const char *expected)
{
        return strlen(given) == strlen(expected) &&
               CRYPTO_memcmp(given, expected, strlen(expected)) == 0;
}

void e2b_reply_error(struct http_request *r, int status, const char *fmt, ...)
{
        char message[1024];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(message, sizeof(message), fmt, ap);
        va_end(ap);
        http_reply_json(r, status, json_pack("{s:i, s:s}", "code", status, "message", message));
}

/* 429 past the key's quota, in E2B's error shape with the quota and what
 * the key holds (kernels_quota_check); takes why. */
void e2b_reply_quota(struct http_request *r, json_t *why)
{
        json_object_set_new(why, "code", json_integer(429));
        http_reply_json(r, 429, why);
}

bool e2b_key_form(const char *key)
{
        return strncmp(key, "e2b_", 4) == 0 && key[4] &&
               key[4 + strspn(key + 4, "0123456789abcdef")] == '\0';
}

struct e2b_sandbox *e2b_find_ready(const char *id)
{
        struct e2b_sandbox *s = e2b_find_any(id);

        return s && s->ready && s->phase == E2B_RUNNING ? s : NULL;
}

bool e2b_token_ok(struct e2b_sandbox *s, const char *token)
{
        return token_matches(token, s->token);
}

/* The E2B sandbox ids, as kernels/sandboxes.h's names. */
static bool name_resolve(const char *name, struct sandbox **box, const char **owner)
{
        struct e2b_sandbox *s = e2b_find_ready(name);

        if (!s)
                return false;
        *box = s->box;
        *owner = s->owner;
        return true;
}

/* Its ports open with its traffic token only: the envd token, which
 * reaches its files and processes, is not one to hand to an app's users. */
static bool name_token_ok(const char *name, const char *token)
{
        struct e2b_sandbox *s = e2b_find_any(name);

        return s && (e2b_find_ready(name) || e2b_wakeable(s)) &&
               token_matches(token, s->traffic_token);
}

const struct sandbox_names e2b_names = {.resolve = name_resolve,
                                        .token_ok = name_token_ok,
                                        .asleep = e2b_name_asleep,
                                        .wake = e2b_name_wake,
                                        .wake_cancel = e2b_name_wake_cancel};

const char *e2b_owner(const struct e2b_sandbox *s)
{
        return s->owner;
}

struct sandbox *e2b_box(struct e2b_sandbox *s)
{
        return s->box;
}

json_t *e2b_env(const struct e2b_sandbox *s)
{
        json_t *env = json_pack("{s:s, s:s}", "E2B_SANDBOX", "true", "E2B_SANDBOX_ID", s->id);

        if (env && s->template_id[0] &&
            json_object_set_new(env, "E2B_TEMPLATE_ID", json_string(s->template_id)) < 0) {
                json_decref(env);
                return NULL;
        }
        if (env && s->env && json_object_update(env, s->env) < 0) {
                json_decref(env);
                return NULL;
        }
        return env;
}

const char *e2b_workdir(const struct e2b_sandbox *s)
{
        return s->workdir;
}

bool e2b_authorized_api(struct http_request *r)
{
        char key[512];
        bool ok;

        /* (With --no-auth too: it makes the caller an admin.) */
        if (http_authorized(r->wsi))
                return true;
        ok = header(r, "x-api-key:", key, sizeof(key)) && http_authorized_key(key, strlen(key));
        explicit_bzero(key, sizeof(key));
        return ok;
}

/* ---- routing ---------------------------------------------------------------- */

/* Whether s (found by its id, or by a signature) may take a request now:
 * running, or when wake_ok asleep and woken by it (wake.c), and its key
 * still there. A sandbox whose key was removed is reached by admins only,
 * so its token stops working with the key. */
static bool usable(struct http_request *r, struct e2b_sandbox *s, bool wake_ok)
{
        if (wake_ok && e2b_wakeable(s))
                return true;
        if (s && s->ready && s->phase != E2B_RUNNING && tenants_exists(s->owner)) {
                e2b_reply_error(r, 502, "The sandbox is %s: connect to it to resume it",
                                s->phase == E2B_RESUMING ? "being resumed" : "paused");
                return false;
        }
        if (!s || !s->ready || !tenants_exists(s->owner)) {
                /* 502 is what E2B answers for a sandbox that is gone; the
                 * SDK turns it into its "sandbox was killed" error. */
                e2b_reply_error(r, 502, "The sandbox was not found (killed or timed out)");
                return false;
        }
        return true;
}

/* Its requests run as its owner: the kernels of its contexts are the
 * owner's. */
static void act_as_owner(const struct e2b_sandbox *s)
{
        if (!config_get()->no_auth) {
                struct tenant_caller owner = {.admin = false};

                snprintf(owner.name, sizeof(owner.name), "%s", s->owner);
                tenants_set_caller(&owner);
        }
}

static bool sandbox_plane(struct http_request *r, char *port, size_t size)
{
        return header(r, "e2b-sandbox-port:", port, size);
}

/* Whether the request carries s's token for port. Each token is good in
 * its own header for its own plane: envd's (X-Access-Token) for envd; on
 * the code interpreter's port, which is a server in the sandbox for E2B
 * (its SDKs send the traffic token there, to execute the envd token too),
 * either. */
static bool credentials_ok(struct http_request *r, const struct e2b_sandbox *s, const char *port)
{
        char token[128];
        bool ok = false;

        if (config_get()->no_auth)
                return true;
        if (header(r, "x-access-token:", token, sizeof(token)))
                ok = token_matches(token, s->token);
        if (!ok && strcmp(port, E2B_JUPYTER_PORT) == 0 &&
            header(r, "e2b-traffic-access-token:", token, sizeof(token)))
                ok = token_matches(token, s->traffic_token);
        explicit_bzero(token, sizeof(token));
        return ok;
}

/* e2b_sandbox_of, or with wake_ok a sandbox asleep that the request
 * is to wake too. */
static struct e2b_sandbox *sandbox_of(struct http_request *r, bool wake_ok)
{
        char id[64], port[16] = E2B_ENVD_PORT;
        struct e2b_sandbox *s;

        /* Found whoever asks: its access token is the credential here. */
        if (r->e2b_signed[0]) {
                s = e2b_find_any(r->e2b_signed);
                return usable(r, s, wake_ok) ? s : NULL;
        }
        sandbox_plane(r, port, sizeof(port));
        s = header(r, "e2b-sandbox-id:", id, sizeof(id)) ? e2b_find_any(id) : NULL;
        if (s && !credentials_ok(r, s, port)) {
                /* A running sandbox's wrong token is said (envd's 401, the
                 * SDKs' error for it). Any other is answered as an unknown
                 * id: that it is paused is for its token's holder to learn. */
                if (s->ready && s->phase == E2B_RUNNING && tenants_exists(s->owner)) {
                        e2b_reply_error(r, 401, "Missing or wrong sandbox access token");
                        return NULL;
                }
                s = NULL;
        }
        if (!usable(r, s, wake_ok))
                return NULL;
        act_as_owner(s);
        return s;
}

struct e2b_sandbox *e2b_sandbox_of(struct http_request *r)
{
        return sandbox_of(r, false);
}

bool e2b_admit_signed(struct http_request *r, e2b_token_match_fn match, void *arg, bool expired)
{
        struct e2b_sandbox *found = NULL;
        char id[64] = "";

        /* Every running sandbox's token is tried (in constant time each)
         * unless the request names one: the URL names none. */
        if (header(r, "e2b-sandbox-id:", id, sizeof(id))) {
                found = e2b_find_any(id);
                found = found && found->ready && match(found->token, arg) ? found : NULL;
        }
        for (struct e2b_sandbox *s = e2b_sandboxes(); !found && !id[0] && s; s = s->next) {
                if (s->ready && match(s->token, arg))
                        found = s;
        }
        if (!found) {
                e2b_reply_error(r, 401, "invalid signature");
                return false;
        }
        /* Said only of a signature that is good otherwise, as envd does. */
        if (expired) {
                e2b_reply_error(r, 401, "signature is already expired");
                return false;
        }
        if (!usable(r, found, true))
                return false;
        snprintf(r->e2b_signed, sizeof(r->e2b_signed), "%s", found->id);
        act_as_owner(found);
        return true;
}

bool e2b_route(const char *path)
{
        /* Signed file URLs are built on the sandbox URL's origin, without
         * its path (docs/e2b-protocol.md §4.4). */
        return strncmp(path, "e2b/", 4) == 0 || strcmp(path, "files") == 0;
}

/* The route below /e2b ("files" for the signed URLs' /files). */
static const char *route_of(struct http_request *r)
{
        const char *route = strncmp(r->path, "e2b/", 4) == 0 ? r->path + 4 : r->path;

        /* A trailing slash on E2B_SANDBOX_URL makes "//execute". */
        return route + strspn(route, "/");
}

bool e2b_admit(struct http_request *r)
{
        char port[16];
        bool ok;

        if (!sandbox_plane(r, port, sizeof(port)) && strcmp(route_of(r), "files") == 0 &&
            envd_signed(r))
                return envd_signed_admit(r);
        /* A template build's upload: its signed URL is its credential. */
        if (builds_upload_admit(r, r->path + 4 + strspn(r->path + 4, "/"), &ok))
                return ok;
        if (sandbox_plane(r, port, sizeof(port)))
                return sandbox_of(r, true) != NULL;
        /* A volume's content: its own token is the credential. */
        if (e2b_volume_content_route(route_of(r)))
                return e2b_volume_content_admit(r, route_of(r));
        if (strcmp(r->path, "files") == 0) {
                e2b_reply_error(r, 401, "missing signature query parameter");
                return false;
        }
        if (e2b_authorized_api(r))
                return true;
        e2b_reply_error(r, 401, "Invalid API key");
        return false;
}

void e2b_prepare(struct http_request *r)
{
        const char *route = route_of(r);
        struct e2b_sandbox *s;
        char port[16];

        if (builds_upload_prepare(r, route + strspn(route, "/")))
                return;
        if (!sandbox_plane(r, port, sizeof(port)) && e2b_volume_content_route(route)) {
                e2b_volume_content_prepare(r, route);
                return;
        }
        if (!r->e2b_signed[0] &&
            (!sandbox_plane(r, port, sizeof(port)) || strcmp(port, E2B_ENVD_PORT) != 0))
                return;
        /* Asleep: its upload is read whole, and taken once it runs. */
        s = sandbox_of(r, true);
        if (s && s->phase == E2B_RUNNING)
                envd_prepare(r, s, route);
}

/* A request that waited for its sandbox to wake: an upload takes the
 * body read meanwhile, as if it had come once the sandbox ran. */
static void woken_handle(struct http_request *r)
{
        e2b_prepare(r);
        if (!r->responded && r->body_fn && r->body.len)
                r->body_fn(r, (const uint8_t *)r->body.data, r->body.len);
        if (!r->responded)
                e2b_handle(r);
}

void e2b_handle(struct http_request *r)
{
        const char *route = route_of(r);
        struct e2b_sandbox *s;
        char port[16] = E2B_ENVD_PORT;

        if (builds_upload_handle(r, route))
                return;
        if (!r->e2b_signed[0] && !sandbox_plane(r, port, sizeof(port))) {
                if (e2b_volume_content_route(route))
                        e2b_volume_content(r, route);
                else
                        e2b_control_plane(r, route);
                return;
        }
        s = sandbox_of(r, true);
        if (!s)
                return;
        if (s->phase != E2B_RUNNING) {
                e2b_wake_request(s, r, woken_handle);
                return;
        }
        if (strcmp(port, E2B_JUPYTER_PORT) == 0) {
                e2b_code_interpreter(r, s, route);
        } else {
                envd_handle(r, s, route);
        }
}
