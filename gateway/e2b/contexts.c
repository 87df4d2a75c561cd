#include "autoconf.h"

#include "gateway/e2b/contexts.h"
#include "gateway/core/http.h"
#include "gateway/e2b/e2b.h"
#include "gateway/e2b/display.h"
#include "gateway/kernels/run.h"
#include "gateway/kernels/files.h"
#include "gateway/kernels/run_env.h"
#include "gateway/kernels/specs.h"
#include "gateway/kernels/templates.h"
#include "protocol/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOME "/home/user"

/* The code interpreter's errors are plain text (its SDK reads the body as
 * the message). */
static void reply_text(struct http_request *r, int status, const char *message)
{
        http_reply_bytes(r, status, "text/plain", message, strlen(message));
}

static struct http_request *request_of(struct waiter *w)
{
        return lws_container_of(w, struct http_request, waiter);
}

/* The kernelspec serving an E2B language name (python when none) in s:
 * among its template's kernels when it has one; the name as the code
 * interpreter knows it in *name. NULL if none serves it. */
static const struct jp_kernelspec *spec_for(const struct e2b_sandbox *s, const char *language,
                                            char *name, size_t size)
{
        const struct jp_kernelspec_list *specs = kernels_specs();

        if (!specs_language_name(language && *language ? language : "python", name, size))
                return NULL;
        if (!s->spec->template_name[0])
                return specs_for_language(name, config_get()->default_kernel);
        if (specs_speaks(s->spec, name))
                return s->spec;
        for (size_t i = 0; i < specs->count; i++) {
                if (templates_same(&specs->items[i], s->spec) &&
                    specs_speaks(&specs->items[i], name))
                        return &specs->items[i];
        }
        return NULL;
}

/* 400 for a context language no kernelspec serves, naming those that are. */
static void reply_languages(struct http_request *r, const char *language)
{
        char message[1024], installed[768];

        specs_languages(installed, sizeof(installed));
        snprintf(message, sizeof(message),
                 "no kernel for language '%.32s' here; languages: %s (install a kernelspec "
                 "whose \"language\" is it)",
                 language, installed[0] ? installed : "none");
        reply_text(r, 400, message);
}

static struct e2b_context *context_find(struct e2b_sandbox *s, const char *id)
{
        for (struct e2b_context *c = s->contexts; c; c = c->next) {
                if (strcmp(c->id, id) == 0)
                        return c;
        }
        return NULL;
}

/* The contexts of s with a kernel: those E2B_MAX_CONTEXTS bounds. */
static size_t contexts_started(const struct e2b_sandbox *s)
{
        size_t n = 0;

        for (const struct e2b_context *c = s->contexts; c; c = c->next)
                n += c->kernel_id[0] != '\0';
        return n;
}

static json_t *context_json(const struct e2b_context *c)
{
        return json_pack("{s:s, s:s, s:s}", "id", c->id, "language", c->language, "cwd", c->cwd);
}

static char **env_strv(json_t *env)
{
        size_t n = 0;
        char **v = calloc(json_object_size(env) + 1, sizeof(char *));
        const char *key;
        json_t *value;

        json_object_foreach(env, key, value) {
                size_t len = strlen(key) + json_string_length(value) + 2;

                if (!v || !(v[n] = malloc(len)))
                        break;
                snprintf(v[n++], len, "%s=%s", key, json_string_value(value));
        }
        return v;
}

/* pip installs into the user's site directory (the system's is read-only);
 * Python puts that on sys.path only if it existed at start. Made now, and
 * put where Python would (before the system's), a package pip installs is
 * importable at once, as it is in E2B's sandboxes. */
static const char user_site_expression[] =
    "(lambda os, site, sys: (os.makedirs(site.getusersitepackages(), exist_ok=True),"
    " site.getusersitepackages() in sys.path or sys.path.insert(min([i for i, p in"
    " enumerate(sys.path) if p in site.getsitepackages()] or [len(sys.path)]),"
    " site.getusersitepackages())))(__import__('os'), __import__('site'),"
    " __import__('sys'))";

/* cwd as a single-quoted shell word (each ' as '\''), for bash. */
static char *shell_quote(const char *cwd)
{
        size_t n = 3;
        char *out, *o;

        for (const char *p = cwd; *p; p++)
                n += *p == '\'' ? 4 : 1;
        out = malloc(n);
        if (!out)
                return NULL;
        o = out;
        *o++ = '\'';
        for (const char *p = cwd; *p; p++) {
                if (*p == '\'') {
                        memcpy(o, "'\\''", 4);
                        o += 4;
                } else {
                        *o++ = *p;
                }
        }
        *o++ = '\'';
        *o = '\0';
        return out;
}

/* What a context's kernel runs each time it starts (E2B's server moves
 * each new context to its cwd likewise): for Python, E2B's result formats
 * (e2b_display.h), the user's site directory and the move; for the other
 * languages E2B's code interpreter serves, the move, when the cwd is not
 * the home directory their kernels start in. The cwd was checked to be a
 * directory the user can enter (context_cwd_ok); if it has gone since,
 * the failure is logged and the kernel stays in the home directory. */
/* What a Java context's kernel runs each time it starts: the sandbox's
 * envs as system properties (E2B's Java reads them with System.getProperty:
 * a JVM's environment is fixed when it starts) and the context's directory
 * as user.dir, as E2B's template sets them. */
static int java_startup(const struct e2b_sandbox *s, const struct e2b_context *c, char **code)
{
        json_t *props = s->env ? json_deep_copy(s->env) : json_object();
        int rc = props ? 0 : -ENOMEM;

        *code = NULL;
        if (rc == 0 && json_object_set_new(props, "user.dir", json_string(c->cwd)) < 0)
                rc = -ENOMEM;
        if (rc == 0)
                rc = run_env_java_properties(props, code);
        json_decref(props);
        return rc;
}

static int context_startup(const struct e2b_sandbox *s, const struct e2b_context *c,
                           struct kernel *k)
{
        const char *display = e2b_display_expression();
        json_t *dir = json_string(c->cwd);
        char *literal = dir ? json_dumps(dir, JSON_ENCODE_ANY) : NULL, *code = NULL, *word = NULL;
        bool home = strcmp(c->cwd, HOME) == 0, expression = false;
        int n = 0, rc = 0;

        json_decref(dir);
        if (!literal) {
                rc = -ENOMEM;
                goto out;
        }
        /* A JSON string is a literal of JavaScript and of R as it is. */
        if (strcmp(c->language, "java") == 0) {
                rc = java_startup(s, c, &code);
                if (rc == 0)
                        rc = kernel_set_startup_code(k, code, false);
                goto out;
        }
        /* One expression for Python: the display formats first, so that a
         * cwd gone since (or a full disk) does not leave them out. */
        if (strcmp(c->language, "python") == 0) {
                n = display ? asprintf(&code, "(%s, %s, __import__('os').chdir(%s))", display,
                                       user_site_expression, literal)
                            : -1;
                expression = true;
        } else if (home)
                goto out;
        else if (strcmp(c->language, "javascript") == 0 || strcmp(c->language, "typescript") == 0)
                n = asprintf(&code, "process.chdir(%s);", literal);
        else if (strcmp(c->language, "r") == 0)
                n = asprintf(&code, "setwd(%s)", literal);
        else if (strcmp(c->language, "bash") == 0)
                n = (word = shell_quote(c->cwd)) ? asprintf(&code, "cd -- %s", word) : -1;
        else
                goto out;
        if (n < 0) {
                code = NULL;
                rc = -ENOMEM;
                goto out;
        }
        rc = kernel_set_startup_code(k, code, expression);
out:
        free(word);
        free(code);
        free(literal);
        return rc;
}

/* Records a new context of s, last in its list (E2B lists them in
 * creation order), without a kernel. */
static struct e2b_context *context_record(struct e2b_sandbox *s, const char *language,
                                          const char *cwd)
{
        struct e2b_context *c = calloc(1, sizeof(*c)), **link = &s->contexts;

        if (!c)
                return NULL;
        /* Random, as E2B's are: ids made from a counter and the clock
         * collided (n ^ t repeats when t moves on by one). */
        jp_uuid4(c->id);
        snprintf(c->language, sizeof(c->language), "%s", language);
        snprintf(c->cwd, sizeof(c->cwd), "%s", cwd && *cwd ? cwd : HOME);
        while (*link)
                link = &(*link)->next;
        *link = c;
        return c;
}

static void context_remove(struct e2b_sandbox *s, struct e2b_context *c)
{
        for (struct e2b_context **link = &s->contexts; *link; link = &(*link)->next) {
                if (*link == c) {
                        *link = c->next;
                        free(c);
                        return;
                }
        }
}

/* Gives c the kernel k: its id, and what it runs at each start. */
static int context_attach(const struct e2b_sandbox *s, struct e2b_context *c, struct kernel *k)
{
        int rc = context_startup(s, c, k);

        if (rc == 0)
                snprintf(c->kernel_id, sizeof(c->kernel_id), "%s", k->id);
        return rc;
}

int e2b_kernel_env(const struct e2b_sandbox *s, const struct jp_kernelspec *spec, char ***out)
{
        json_t *own = e2b_env(s);
        char **env = calloc(1, sizeof(char *)), **sandbox_env = own ? env_strv(own) : NULL;
        char reason[256];
        size_t nenv = 0;
        int err;

        /* The kernelspec's env first, as POST /api/kernels has it, then
         * the sandbox's (its envVars checked when it was created). */
        json_decref(own);
        err = env && sandbox_env ? kernel_env_append(json_object_get(spec->spec, "env"), &env,
                                                     &nenv, reason, sizeof(reason))
                                 : -ENOMEM;
        if (err == -EINVAL)
                log_warn("kernelspec %s: its env is refused: %s", spec->name, reason);
        for (size_t i = 0; err == 0 && sandbox_env[i]; i++) {
                char **grown = realloc(env, (nenv + 2) * sizeof(char *));

                if (!grown) {
                        err = -ENOMEM;
                        break;
                }
                env = grown;
                env[nenv++] = sandbox_env[i];
                env[nenv] = NULL;
                sandbox_env[i] = NULL;
        }
        jp_strv_free(sandbox_env);
        if (err < 0) {
                jp_strv_free(env);
                env = NULL;
        }
        *out = env;
        return err;
}

/* Starts c's kernel, of spec; w hears when it is ready. 0 or -errno. */
static int context_launch(struct e2b_sandbox *s, struct e2b_context *c,
                          const struct jp_kernelspec *spec, struct waiter *w)
{
        char **env;
        struct kernel *k;
        int err = e2b_kernel_env(s, spec, &env);

        if (err == 0)
                err = kernel_start(spec, env, &s->box->limits, s->box, w, &k);
        jp_strv_free(env);
        if (err == 0 && context_attach(s, c, k) < 0) {
                waiter_cancel(w);
                kernel_shutdown(k, NULL);
                err = -ENOMEM;
        }
        return err;
}

struct e2b_context *e2b_context_new(struct e2b_sandbox *s, const struct jp_kernelspec *spec,
                                    const char *language, const char *cwd, struct waiter *w,
                                    int *err)
{
        struct e2b_context *c = context_record(s, language, cwd);

        *err = c ? context_launch(s, c, spec, w) : -ENOMEM;
        if (c && *err) {
                context_remove(s, c);
                c = NULL;
        }
        return c;
}

struct e2b_context *e2b_context_adopt(struct e2b_sandbox *s, struct kernel *k, const char *language)
{
        struct e2b_context *c = context_record(s, language, NULL);

        if (c && context_attach(s, c, k) < 0) {
                context_remove(s, c);
                c = NULL;
        }
        return c;
}

struct e2b_context *e2b_context_restore(struct e2b_sandbox *s, const char *id, const char *language,
                                        const char *cwd, struct kernel *k)
{
        struct e2b_context *c = context_record(s, language, cwd);

        if (!c)
                return NULL;
        snprintf(c->id, sizeof(c->id), "%s", id);
        c->on_first_use = !k;
        if (k && context_attach(s, c, k) < 0) {
                context_remove(s, c);
                c = NULL;
        }
        return c;
}

json_t *e2b_contexts_record(const struct e2b_sandbox *s)
{
        json_t *list = json_array();

        for (const struct e2b_context *c = s->contexts; list && c; c = c->next) {
                struct kernel *k = c->kernel_id[0] ? kernel_find_any(c->kernel_id) : NULL;
                json_t *entry = json_pack("{s:s, s:s, s:s}", "id", c->id, "language", c->language,
                                          "cwd", c->cwd);
                json_t *env = jp_strv_to_json(k ? k->env : NULL);

                if (entry && k && kernel_reported_ipc(k))
                        json_object_set_new(entry, "kernel",
                                            json_pack("{s:s, s:s, s:s, s:s, s:O}", "id", k->id,
                                                      "kernelspec", k->spec->name, "key", k->key,
                                                      "ipc", kernel_reported_ipc(k), "env",
                                                      env ? env : json_array()));
                json_decref(env);
                if (!entry || json_array_append_new(list, entry) < 0) {
                        json_decref(list);
                        return NULL;
                }
        }
        return list;
}

void e2b_contexts_add_defaults(struct e2b_sandbox *s)
{
        char name[32];
        struct e2b_context *c;

        /* Not worth a kernel until it runs something: most sandboxes never
         * run JavaScript. */
        if (spec_for(s, "javascript", name, sizeof(name))) {
                c = context_record(s, name, NULL);
                if (c)
                        c->on_first_use = true;
        }
}

void e2b_contexts_stop(struct e2b_sandbox *s)
{
        while (s->contexts) {
                struct e2b_context *c = s->contexts;
                struct kernel *k = c->kernel_id[0] ? kernel_find_any(c->kernel_id) : NULL;

                s->contexts = c->next;
                if (k)
                        kernel_shutdown(k, NULL);
                free(c);
        }
}

struct e2b_sandbox *e2b_sandbox_of_kernel(const char *kernel_id, struct e2b_context **ctx)
{
        for (struct e2b_sandbox *s = e2b_sandboxes(); s; s = s->next) {
                for (struct e2b_context *c = s->contexts; c; c = c->next) {
                        if (c->kernel_id[0] && strcmp(c->kernel_id, kernel_id) == 0) {
                                *ctx = c;
                                return s;
                        }
                }
        }
        return NULL;
}

/* A context whose kernel did not start: a default one waits for its next
 * use, another is gone. */
static void context_failed(struct e2b_sandbox *s, struct e2b_context *c)
{
        if (c->on_first_use)
                c->kernel_id[0] = '\0';
        else
                context_remove(s, c);
}

/* Whether cwd is a directory the sandbox's user can enter (every step of
 * it searched as that user, inside the sandbox's root); false after
 * replying 400 naming it. */
static bool context_cwd_ok(struct http_request *r, struct e2b_sandbox *s, const char *cwd)
{
        char path[PATH_MAX], entered[PATH_MAX + 2], message[PATH_MAX + 256];
        int rc;

        if (!cwd)
                return true;
        if (cwd[0] != '/') {
                reply_text(r, 400, "cwd must be an absolute path");
                return false;
        }
        rc = files_normalize(cwd, path, sizeof(path));
        /* "dir/." resolves only through a search of dir itself. */
        if (rc == 0) {
                snprintf(entered, sizeof(entered), "%s/.", strcmp(path, "/") ? path : "");
                rc = files_enter_dir(s->box, FILES_USER, entered);
        }
        if (rc == 0)
                return true;
        snprintf(message, sizeof(message),
                 "Failed to set working directory: cwd '%.1024s' is not a directory the "
                 "sandbox's user can enter (%s)",
                 cwd, strerror(-rc));
        reply_text(r, 400, message);
        return false;
}

/* ---- /contexts -------------------------------------------------------------- */

static void on_context_ready(struct waiter *w, void *subject, int status, const char *message)
{
        struct kernel *k = subject;
        struct http_request *r = request_of(w);
        struct e2b_context *c;
        struct e2b_sandbox *s = e2b_sandbox_of_kernel(k->id, &c);

        if (!s) {
                reply_text(r, 500, "the sandbox went away");
                return;
        }
        if (status) {
                context_failed(s, c);
                reply_text(r, 500, message ? message : "the context failed to start");
                return;
        }
        http_reply_json(r, 200, context_json(c));
}

static void on_context_restarted(struct waiter *w, void *subject, int status, const char *message)
{
        struct kernel *k = subject;
        (void)k;
        if (status)
                reply_text(request_of(w), 500, message ? message : "the context failed to restart");
        else
                http_reply_empty(request_of(w), 204);
}

static void reply_start_failure(struct http_request *r, int err)
{
        reply_text(r, err == -EAGAIN || err == -EDQUOT ? 429 : 500,
                   err == -EDQUOT ? "quota of this key reached"
                                  : "cannot start a kernel for the context");
}

static void create_context(struct http_request *r, struct e2b_sandbox *s)
{
        const struct jp_kernelspec *spec;
        const char *language, *cwd;
        char name[32];
        json_t *body = http_parse_body(r);
        int err;

        if (!body)
                return;
        language = json_string_value(json_object_get(body, "language"));
        cwd = json_string_value(json_object_get(body, "cwd"));
        spec = spec_for(s, language, name, sizeof(name));
        if (!spec) {
                reply_languages(r, language ? language : "python");
        } else if (!context_cwd_ok(r, s, cwd)) {
                /* answered */
        } else if (contexts_started(s) >= E2B_MAX_CONTEXTS) {
                reply_text(r, 400, "too many contexts in this sandbox");
        } else {
                r->waiter.done = on_context_ready;
                if (!e2b_context_new(s, spec, name, cwd, &r->waiter, &err))
                        reply_start_failure(r, err);
        }
        json_decref(body);
}

static void contexts(struct http_request *r, struct e2b_sandbox *s, const char *route)
{
        char id[64], action[32] = "";
        struct e2b_context *c;
        struct kernel *k;
        json_t *list;

        if (strcmp(route, "contexts") == 0 && r->method == HTTP_GET) {
                list = json_array();
                for (c = s->contexts; list && c; c = c->next)
                        json_array_append_new(list, context_json(c));
                http_reply_json(r, 200, list);
                return;
        }
        if (strcmp(route, "contexts") == 0 && r->method == HTTP_POST) {
                create_context(r, s);
                return;
        }
        if (sscanf(route, "contexts/%63[^/]/%31s", id, action) < 1 || !(c = context_find(s, id))) {
                reply_text(r, 404, "Context not found");
                return;
        }
        k = c->kernel_id[0] ? kernel_find(c->kernel_id) : NULL;
        if (strcmp(action, "restart") == 0 && r->method == HTTP_POST && k) {
                /* Answered once the context is ready again, as E2B's is. */
                r->waiter.done = on_context_restarted;
                kernel_restart(k, &r->waiter);
        } else if (strcmp(action, "restart") == 0 && r->method == HTTP_POST && !c->kernel_id[0]) {
                /* Not started yet: it starts afresh anyway. */
                http_reply_empty(r, 204);
        } else if (!action[0] && r->method == HTTP_DELETE) {
                if (k)
                        kernel_shutdown(k, NULL);
                context_remove(s, c);
                http_reply_empty(r, 204);
        } else if (k || !c->kernel_id[0]) {
                reply_text(r, 405, "Method not allowed");
        } else {
                reply_text(r, 404, "Context not found");
        }
}

/* ---- /execute ----------------------------------------------------------------- */

static void forget_pending_run(struct http_request *r)
{
        json_t *body = r->ctx;

        json_decref(body);
        r->ctx = NULL;
        r->cleanup = NULL;
}

static void on_run_context_ready(struct waiter *w, void *subject, int status, const char *message)
{
        struct kernel *k = subject;
        struct http_request *r = request_of(w);
        json_t *body = json_incref(r->ctx);
        struct e2b_context *c;
        struct e2b_sandbox *s = e2b_sandbox_of_kernel(k->id, &c);

        forget_pending_run(r);
        if (!s) {
                reply_text(r, 500, "the sandbox went away");
        } else if (status) {
                context_failed(s, c);
                reply_text(r, 500, message ? message : "the context failed to start");
        } else {
                execute_start(r, k, json_string_value(json_object_get(body, "code")),
                              json_object_get(body, "env_vars"), 0, EXECUTE_GONE_CUT);
        }
        json_decref(body);
}

/* Runs the code of body in c once c's kernel, started now, is ready: c is
 * a new default context of its language, or one whose kernel starts at
 * its first use. */
static void run_when_started(struct http_request *r, struct e2b_sandbox *s, struct e2b_context *c,
                             const struct jp_kernelspec *spec, json_t *body)
{
        int err;

        if (contexts_started(s) >= E2B_MAX_CONTEXTS) {
                context_failed(s, c);
                reply_text(r, 400, "too many contexts in this sandbox");
                return;
        }
        r->ctx = json_incref(body);
        r->cleanup = forget_pending_run;
        r->waiter.done = on_run_context_ready;
        err = context_launch(s, c, spec, &r->waiter);
        if (err) {
                forget_pending_run(r);
                context_failed(s, c);
                reply_start_failure(r, err);
        }
}

/* The context a run names (context_id) or the default one of its
 * language (its oldest; made when there is none: E2B's code interpreter
 * does so); NULL after replying. *spec is set when its kernel must start
 * first. */
static struct e2b_context *run_context(struct http_request *r, struct e2b_sandbox *s,
                                       json_t *ctx_id, json_t *language,
                                       const struct jp_kernelspec **spec)
{
        struct e2b_context *c = NULL;
        char want[32];

        *spec = NULL;
        if (json_is_string(ctx_id)) {
                c = context_find(s, json_string_value(ctx_id));
                if (!c) {
                        char msg[128];

                        snprintf(msg, sizeof(msg), "Context %.64s not found",
                                 json_string_value(ctx_id));
                        reply_text(r, 404, msg);
                        return NULL;
                }
                if (!c->kernel_id[0] && !(*spec = spec_for(s, c->language, want, sizeof(want)))) {
                        reply_languages(r, c->language);
                        return NULL;
                }
                return c;
        }
        *spec = spec_for(s, json_string_value(language), want, sizeof(want));
        if (!*spec) {
                reply_languages(r,
                                json_is_string(language) ? json_string_value(language) : "python");
                return NULL;
        }
        for (c = s->contexts; c; c = c->next) {
                if (strcmp(c->language, want) == 0)
                        break;
        }
        if (!c && !(c = context_record(s, want, NULL)))
                reply_text(r, 500, "out of memory");
        if (c && c->kernel_id[0])
                *spec = NULL;
        return c;
}

/* Whether run_code's env (may be NULL) can be set for one run in a kernel
 * of spec; false after a 400 that says why. */
static bool run_env_ok(struct http_request *r, json_t *env, const struct jp_kernelspec *spec)
{
        const char *language = json_string_value(json_object_get(spec->spec, "language"));
        const char *name;
        json_t *value;
        char message[256];

        if (!env || json_object_size(env) == 0)
                return true;
        json_object_foreach(env, name, value) {
                if (run_env_name_valid(name))
                        continue;
                snprintf(message, sizeof(message),
                         "env_vars: invalid name \"%.64s\": a name is letters, digits and _, "
                         "not starting with a digit, of at most %d bytes",
                         name, RUN_ENV_MAX_NAME);
                reply_text(r, 400, message);
                return false;
        }
        if (!run_env_supported(language)) {
                snprintf(message, sizeof(message),
                         "env_vars are not supported in a context of language '%.32s'",
                         language ? language : "");
                reply_text(r, 400, message);
                return false;
        }
        return true;
}

static void run_code(struct http_request *r, struct e2b_sandbox *s)
{
        json_t *body = http_parse_body(r);
        json_t *code, *ctx_id, *language, *env;
        const struct jp_kernelspec *spec;
        struct e2b_context *c;
        struct kernel *k;

        if (!body)
                return;
        code = json_object_get(body, "code");
        ctx_id = json_object_get(body, "context_id");
        language = json_object_get(body, "language");
        env = json_object_get(body, "env_vars");
        if (!json_is_string(code) || (env && !e2b_string_map(env, E2B_MAX_ENV))) {
                reply_text(r, 400, "code must be a string and env_vars an object of strings");
                goto out;
        }
        if (json_is_string(ctx_id) && json_is_string(language)) {
                reply_text(r, 400, "give context_id or language, not both");
                goto out;
        }
        c = run_context(r, s, ctx_id, language, &spec);
        if (!c)
                goto out;
        if (spec) {
                if (run_env_ok(r, env, spec))
                        run_when_started(r, s, c, spec, body);
                goto out;
        }
        k = kernel_find(c->kernel_id);
        if (!k) {
                reply_text(r, 404, "The context's kernel is gone");
                goto out;
        }
        if (!run_env_ok(r, env, k->spec))
                goto out;
        /* The SDK keeps its own time; an abandoned call interrupts the cell.
         * A kernel still starting (a first use) runs the cell once ready. */
        execute_start(r, k, json_string_value(code), env, 0, EXECUTE_GONE_CUT);
out:
        json_decref(body);
}

void e2b_code_interpreter(struct http_request *r, struct e2b_sandbox *s, const char *route)
{
        if (strcmp(route, "execute") == 0 && r->method == HTTP_POST)
                run_code(r, s);
        else if (strncmp(route, "contexts", 8) == 0)
                contexts(r, s, route);
        else
                reply_text(r, 404, "Not found");
}
