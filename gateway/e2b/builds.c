#include "autoconf.h"

#include "gateway/core/http.h"
#include "gateway/e2b/build_internal.h"
#include "gateway/e2b/e2b.h"
#include "gateway/kernels/host.h"
#include "gateway/kernels/kernels.h"
#include "gateway/kernels/pause.h"
#include "gateway/kernels/templates.h"
#include "gateway/core/tenants.h"
#include "protocol/buf.h"
#include "protocol/fleetid.h"
#include "protocol/log.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TEMPLATES_DIR  "templates"
#define LAYERS_DIR     "layers"
#define RECORD         "templates.json"
#define RECORD_MAX     (16 << 20)

static const struct config *config;
static struct build_tpl *templates;
static size_t ntemplates;
static int templates_fd = -1, layers_fd = -1;
static bool enabled;
static char why_disabled[160];

const struct config *build_config(void)
{
        return config;
}

const char *build_disabled(void)
{
        return enabled ? NULL : why_disabled;
}

struct build_tpl *build_templates(void)
{
        return templates;
}

size_t build_tpl_count(void)
{
        return ntemplates;
}

void build_tpl_add(struct build_tpl *t)
{
        t->next = templates;
        templates = t;
        ntemplates++;
}

void build_tpl_remove(struct build_tpl *t)
{
        for (struct build_tpl **link = &templates; *link; link = &(*link)->next) {
                if (*link == t) {
                        *link = t->next;
                        ntemplates--;
                        break;
                }
        }
}

/* ---- names, as E2B reads them ----------------------------------------------- */

static bool all_of(const char *s, size_t n, const char *extra)
{
        for (size_t i = 0; i < n; i++) {
                if (!islower((unsigned char)s[i]) && !isdigit((unsigned char)s[i]) &&
                    !strchr(extra, s[i]))
                        return false;
        }
        return n > 0;
}

/* "[namespace/]alias[:tag]", lowercased: the alias (with its namespace)
 * and the tag ("" for none, and for "default"). 0 or -EINVAL with err. */
int build_parse_name(const char *in, char alias[BUILD_ALIAS_MAX], char tag[BUILD_ALIAS_MAX],
                      char *err, size_t errlen)
{
        char low[BUILD_ALIAS_MAX * 2];
        size_t n = strlen(in), a;
        const char *slash;

        alias[0] = tag[0] = '\0';
        if (n == 0 || n >= sizeof(low)) {
                snprintf(err, errlen, "a template name is 1 to %d characters",
                         BUILD_ALIAS_MAX - 1);
                return -EINVAL;
        }
        for (size_t i = 0; i <= n; i++)
                low[i] = (char)tolower((unsigned char)in[i]);
        a = strcspn(low, ":");
        slash = memchr(low, '/', a);
        if (a >= BUILD_ALIAS_MAX ||
            (slash ? !all_of(low, (size_t)(slash - low), "-_") ||
                         !all_of(slash + 1, a - (size_t)(slash - low) - 1, "-_")
                   : !all_of(low, a, "-_"))) {
                snprintf(err, errlen, "invalid template name '%.128s': use a-z, 0-9, - and _",
                         in);
                return -EINVAL;
        }
        memcpy(alias, low, a);
        alias[a] = '\0';
        if (low[a] == ':') {
                const char *t = low + a + 1;

                if (!all_of(t, strlen(t), "-_.") || strlen(t) >= BUILD_ALIAS_MAX) {
                        snprintf(err, errlen, "invalid tag '%.128s': use a-z, 0-9, -, _ and .",
                                 low + a + 1);
                        return -EINVAL;
                }
                if (strcmp(t, BUILD_DEFAULT_TAG) != 0)
                        snprintf(tag, BUILD_ALIAS_MAX, "%s", t);
        }
        return 0;
}

/* A tag of a tags list: as E2B, a-z 0-9 - _ . and not a UUID. */
int build_check_tag(const char *in, char out[BUILD_ALIAS_MAX], char *err, size_t errlen)
{
        size_t n = strlen(in);

        for (size_t i = 0; i <= n && i < BUILD_ALIAS_MAX; i++)
                out[i] = (char)tolower((unsigned char)in[i]);
        if (n >= BUILD_ALIAS_MAX || !all_of(out, n, "-_.") || jp_uuid_valid(out, n)) {
                snprintf(err, errlen,
                         "invalid tag '%.128s': a tag is a-z, 0-9, -, _ and ., and not a UUID", in);
                return -EINVAL;
        }
        return 0;
}

/* The gateway's own templates: E2B's names for the host's, the
 * operator's (--template) and kernelspecs. */
bool build_builtin_name(const char *name)
{
        return strcmp(name, "base") == 0 || strcmp(name, "code-interpreter-v1") == 0 ||
               templates_find(name) || jp_kernelspec_find(kernels_specs(), name);
}

const char *builds_image_template(const char *image)
{
        size_t n = strlen(image);

        if (strcmp(image, BUILD_BASE_IMAGE) == 0 || strcmp(image, BUILD_BASE_IMAGE ":latest") == 0)
                return "";
        for (size_t i = 0; config && config->template_image && config->template_image[i]; i++) {
                const char *entry = config->template_image[i];
                const char *eq = strrchr(entry, '=');

                if (eq && (size_t)(eq - entry) == n && strncmp(entry, image, n) == 0)
                        return strcmp(eq + 1, "base") == 0 ||
                                               strcmp(eq + 1, "code-interpreter-v1") == 0
                                       ? ""
                                       : eq + 1;
        }
        return NULL;
}

/* ---- the store ---------------------------------------------------------------- */

struct build_tpl *build_tpl_by_id(const char *id)
{
        for (struct build_tpl *t = templates; t; t = t->next) {
                if (strcmp(t->id, id) == 0 && tenants_may_reach(t->owner))
                        return t;
        }
        return NULL;
}

/* The caller's template called alias (an admin's own first). */
struct build_tpl *build_tpl_by_alias(const char *alias)
{
        const struct tenant_caller *me = tenants_caller();
        struct build_tpl *found = NULL;

        for (struct build_tpl *t = templates; t; t = t->next) {
                if (strcmp(t->alias, alias) != 0 || !tenants_may_reach(t->owner))
                        continue;
                if (!found || (me && strcmp(t->owner, me->name) == 0))
                        found = t;
        }
        return found;
}

struct build *build_by_id(struct build_tpl *t, const char *id)
{
        for (struct build *b = t ? t->builds : NULL; b; b = b->next) {
                if (strcmp(b->id, id) == 0)
                        return b;
        }
        return NULL;
}

/* The ready build tag names in t ("" for the default: the tag "default",
 * else the newest ready build). */
struct build *build_by_tag(struct build_tpl *t, const char *tag)
{
        json_t *entry = json_object_get(t->tags, tag[0] ? tag : BUILD_DEFAULT_TAG);
        struct build *b = entry ? build_by_id(t, json_string_value(json_object_get(entry, "build")))
                                : NULL;

        if (b && b->status == BUILD_READY)
                return b;
        if (tag[0])
                return NULL;
        for (b = t->builds; b; b = b->next) {
                if (b->status == BUILD_READY)
                        return b;
        }
        return NULL;
}

static void build_free(struct build *b)
{
        json_decref(b->tags);
        json_decref(b->logs);
        json_decref(b->reason);
        json_decref(b->layers);
        json_decref(b->env);
        free(b->start_cmd);
        free(b->ready_cmd);
        free(b);
}

struct build *build_new(struct build_tpl *t)
{
        struct build *b = calloc(1, sizeof(*b));

        if (!b)
                return NULL;
        b->tpl = t;
        b->tags = json_array();
        b->logs = json_array();
        b->layers = json_array();
        b->env = json_object();
        if (!b->tags || !b->logs || !b->layers || !b->env || jp_uuid4(b->id) < 0) {
                build_free(b);
                return NULL;
        }
        jp_timestamp_now(b->created_at);
        b->next = t->builds;
        t->builds = b;
        return b;
}

void build_tpl_free(struct build_tpl *t)
{
        while (t->builds) {
                struct build *b = t->builds;

                t->builds = b->next;
                build_free(b);
        }
        json_decref(t->tags);
        free(t);
}

/* Whether a ready build other than of skip stacks layer id. */
bool build_layer_in_use(const char *id, const struct build_tpl *skip)
{
        for (struct build_tpl *t = templates; t; t = t->next) {
                for (struct build *b = t == skip ? NULL : t->builds; b; b = b->next) {
                        size_t i;
                        json_t *v;

                        json_array_foreach(b->layers, i, v) {
                                if (strcmp(json_string_value(v), id) == 0)
                                        return true;
                        }
                }
        }
        return false;
}

/* ---- the record: ready builds, across restarts ------------------------------- */

static json_t *build_json(const struct build *b)
{
        return json_pack("{s:s, s:s, s:s, s:O, s:O, s:s, s:b, s:s?, s:s?}", "id", b->id,
                         "created_at", b->created_at, "base", b->base, "layers", b->layers, "env",
                         b->env, "workdir", b->workdir, "root", b->root, "start_cmd",
                         b->start_cmd, "ready_cmd", b->ready_cmd);
}

int build_save(void)
{
        json_t *list = json_array(), *doc;
        char *text;
        int rc;

        if (!list)
                return -ENOMEM;
        for (struct build_tpl *t = templates; t; t = t->next) {
                json_t *builds = json_array();

                for (struct build *b = t->builds; builds && b; b = b->next) {
                        if (b->status == BUILD_READY)
                                json_array_append_new(builds, build_json(b));
                }
                if (json_array_size(builds) > 0)
                        json_array_append_new(list, json_pack("{s:s, s:s, s:s, s:O, s:o}", "id",
                                                              t->id, "alias", t->alias, "owner",
                                                              t->owner, "tags", t->tags, "builds",
                                                              builds));
                else
                        json_decref(builds);
        }
        doc = json_pack("{s:i, s:o}", "version", 1, "templates", list);
        text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
        rc = text ? state_write_file(templates_fd, RECORD, text) : -ENOMEM;
        if (rc < 0)
                log_error("cannot record the built templates: %s", strerror(-rc));
        free(text);
        json_decref(doc);
        return rc;
}

static bool copy_str(json_t *o, const char *key, char *out, size_t size)
{
        const char *v = json_string_value(json_object_get(o, key));

        if (!v || strlen(v) >= size)
                return false;
        memcpy(out, v, strlen(v) + 1);
        return true;
}

static int load_build(struct build_tpl *t, json_t *jb)
{
        struct build *b = build_new(t);
        json_t *layers = json_object_get(jb, "layers"), *env = json_object_get(jb, "env");
        const char *start = json_string_value(json_object_get(jb, "start_cmd"));
        const char *ready = json_string_value(json_object_get(jb, "ready_cmd"));

        if (!b)
                return -ENOMEM;
        if (!copy_str(jb, "id", b->id, sizeof(b->id)) || !jp_uuid_valid(b->id, strlen(b->id)) ||
            !copy_str(jb, "created_at", b->created_at, sizeof(b->created_at)) ||
            !copy_str(jb, "base", b->base, sizeof(b->base)) ||
            !copy_str(jb, "workdir", b->workdir, sizeof(b->workdir)) || !json_is_array(layers) ||
            json_array_size(layers) == 0 || json_array_size(layers) > HOSTMSG_MAX_LAYERS ||
            !json_is_object(env))
                return -EINVAL;
        json_decref(b->layers);
        b->layers = json_incref(layers);
        json_decref(b->env);
        b->env = json_incref(env);
        b->root = json_is_true(json_object_get(jb, "root"));
        b->start_cmd = start ? strdup(start) : NULL;
        b->ready_cmd = ready ? strdup(ready) : NULL;
        b->status = BUILD_READY;
        return 0;
}

static void load(void)
{
        json_error_t jerr;
        json_t *doc, *list, *jt;
        size_t i;
        int fd = openat(templates_fd, RECORD, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

        if (fd < 0)
                return;
        doc = json_read_fd(fd, RECORD_MAX, 0, &jerr);
        close(fd);
        list = json_object_get(doc, "templates");
        json_array_foreach(list, i, jt) {
                struct build_tpl *t = calloc(1, sizeof(*t));
                json_t *builds = json_object_get(jt, "builds"), *jb;
                size_t j;
                int rc = t ? 0 : -ENOMEM;

                if (rc == 0 && (!copy_str(jt, "id", t->id, sizeof(t->id)) ||
                                !copy_str(jt, "alias", t->alias, sizeof(t->alias)) ||
                                !copy_str(jt, "owner", t->owner, sizeof(t->owner)) ||
                                !json_is_object(json_object_get(jt, "tags"))))
                        rc = -EINVAL;
                if (rc == 0)
                        t->tags = json_incref(json_object_get(jt, "tags"));
                json_array_foreach(builds, j, jb) {
                        if (rc == 0)
                                rc = load_build(t, jb);
                }
                if (rc < 0 || ntemplates >= BUILD_MAX_TEMPLATES) {
                        log_warn("built template %.32s left out of %s: malformed", t ? t->id : "",
                                 RECORD);
                        if (t)
                                build_tpl_free(t);
                        continue;
                }
                t->next = templates;
                templates = t;
                ntemplates++;
        }
        if (!doc)
                log_error("cannot read %s/" TEMPLATES_DIR "/" RECORD ": %s", config->state_dir,
                          jerr.text);
        json_decref(doc);
        log_info("%zu built template%s", ntemplates, ntemplates == 1 ? "" : "s");
}

/* Layers no ready build stacks (a build that ran when the gateway
 * stopped): removed. Only names of ours (UUID.img) in our own directory. */
static void remove_orphans(void)
{
        int fd = fcntl(layers_fd, F_DUPFD_CLOEXEC, 3);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        char id[JP_UUID_SIZE];
        struct dirent *de;
        unsigned removed = 0;

        if (!d) {
                if (fd >= 0)
                        close(fd);
                return;
        }
        while ((de = readdir(d)) != NULL) {
                size_t n = strlen(de->d_name);

                if (n != JP_UUID_SIZE - 1 + 4 || strcmp(de->d_name + n - 4, ".img") != 0)
                        continue;
                memcpy(id, de->d_name, JP_UUID_SIZE - 1);
                id[JP_UUID_SIZE - 1] = '\0';
                if (!jp_uuid_valid(id, strlen(id)) || build_layer_in_use(id, NULL))
                        continue;
                if (unlinkat(layers_fd, de->d_name, 0) == 0)
                        removed++;
        }
        closedir(d);
        if (removed)
                log_info("removed %u template layer%s of builds that did not finish", removed,
                         removed == 1 ? "" : "s");
}

int builds_init(const struct config *cfg)
{
        char path[PATH_MAX];
        int state = -1;

        config = cfg;
        host_on_layer_sealed(builds_layer_sealed);
        /* Each image names a template there is. */
        for (size_t i = 0; cfg->template_image && cfg->template_image[i]; i++) {
                const char *entry = cfg->template_image[i], *eq = strrchr(entry, '=');

                if (!eq || eq == entry ||
                    (strcmp(eq + 1, "base") != 0 && strcmp(eq + 1, "code-interpreter-v1") != 0 &&
                     !templates_find(eq + 1))) {
                        log_error("--template-image '%s': give IMAGE=TEMPLATE, TEMPLATE base or "
                                  "a --template NAME",
                                  entry);
                        return -EINVAL;
                }
        }
        if (!cfg->state_dir[0] || geteuid() != 0 || strcmp(cfg->sandbox, "none") == 0) {
                snprintf(why_disabled, sizeof(why_disabled),
                         "template builds need a gateway run as root, sandboxes and a "
                         "--state-dir");
                return 0;
        }
        state = open(cfg->state_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (state < 0 || (mkdirat(state, TEMPLATES_DIR, 0700) < 0 && errno != EEXIST) ||
            (templates_fd = openat(state, TEMPLATES_DIR,
                                   O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
            (mkdirat(templates_fd, LAYERS_DIR, 0700) < 0 && errno != EEXIST) ||
            (layers_fd = openat(templates_fd, LAYERS_DIR,
                                O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
                snprintf(why_disabled, sizeof(why_disabled), "cannot use %s/" TEMPLATES_DIR ": %s",
                         cfg->state_dir, strerror(errno));
                log_error("template builds are off: %s", why_disabled);
                if (state >= 0)
                        close(state);
                return 0;
        }
        close(state);
        snprintf(path, sizeof(path), "%s/" TEMPLATES_DIR, cfg->state_dir);
        if (build_uploads_init(path) < 0) {
                snprintf(why_disabled, sizeof(why_disabled), "cannot use %s/uploads", path);
                log_error("template builds are off: %s", why_disabled);
                return 0;
        }
        snprintf(path, sizeof(path), "%s/" TEMPLATES_DIR "/" LAYERS_DIR, cfg->state_dir);
        host_set_layers_dir(path);
        enabled = true;
        load();
        remove_orphans();
        return 0;
}

void builds_free(void)
{
        while (templates) {
                struct build_tpl *t = templates;

                templates = t->next;
                for (struct build *b = t->builds; b; b = b->next)
                        build_run_abort(b);
                build_tpl_free(t);
        }
        ntemplates = 0;
}

/* ---- what a build records ------------------------------------------------------ */

void build_log(struct build *b, const char *level, const char *fmt, ...)
{
        char message[BUILD_MAX_LOG_LINE], now[JP_TIMESTAMP_SIZE];
        va_list ap;

        if (json_array_size(b->logs) > BUILD_MAX_LOG_ENTRIES)
                return;
        va_start(ap, fmt);
        vsnprintf(message, sizeof(message), fmt, ap);
        va_end(ap);
        jp_timestamp_now(now);
        if (json_array_size(b->logs) == BUILD_MAX_LOG_ENTRIES) {
                snprintf(message, sizeof(message),
                         "(the build's log holds %d entries; what follows is not kept)",
                         BUILD_MAX_LOG_ENTRIES);
                level = "warn";
        }
        /* Output may be any bytes: a message that is not UTF-8 is kept as
         * far as it is. */
        json_array_append_new(b->logs, json_pack("{s:s, s:s, s:s}", "timestamp", now, "level",
                                                 level, "message", message)
                                           ?: json_pack("{s:s, s:s, s:s}", "timestamp", now,
                                                        "level", level, "message",
                                                        "(output that is not UTF-8)"));
}

void build_fail(struct build *b, const char *step, const char *fmt, ...)
{
        char message[BUILD_MAX_LOG_LINE];
        va_list ap;

        if (b->status == BUILD_ERROR || b->status == BUILD_READY)
                return;
        va_start(ap, fmt);
        vsnprintf(message, sizeof(message), fmt, ap);
        va_end(ap);
        build_log(b, "error", "%s", message);
        b->status = BUILD_ERROR;
        json_decref(b->reason);
        b->reason = json_pack("{s:s, s:s}", "message", message, "step", step);
        log_info("template build %s (%s) failed: %s", fleetid_short(b->id).s, b->tpl->alias,
                 message);
}

void build_finished(struct build *b)
{
        b->waiting_seal = true;
}

void builds_layer_sealed(const char *layer_id, int error)
{
        for (struct build_tpl *t = templates; t; t = t->next) {
                struct build *b = build_by_id(t, layer_id);
                size_t i;
                json_t *v;

                if (!b)
                        continue;
                if (b->waiting_seal && error == 0 && b->status == BUILD_BUILDING) {
                        b->waiting_seal = false;
                        b->status = BUILD_READY;
                        json_array_foreach(b->tags, i, v) {
                                char now[JP_TIMESTAMP_SIZE];

                                jp_timestamp_now(now);
                                json_object_set_new(t->tags, json_string_value(v),
                                                    json_pack("{s:s, s:s}", "build", b->id, "at",
                                                              now));
                        }
                        build_log(b, "info", "Build finished: template %s, build %s", t->alias,
                                  b->id);
                        log_info("template %s built (build %s)", t->alias, fleetid_short(b->id).s);
                        build_save();
                        return;
                }
                if (b->status == BUILD_BUILDING)
                        build_fail(b, "finalize", "cannot keep the build's layer: %s",
                                   strerror(error ? error : EIO));
                b->waiting_seal = false;
                host_layer_delete(layer_id);
                return;
        }
        /* A build forgotten meanwhile (its template deleted). */
        host_layer_delete(layer_id);
}

/* ---- quotas --------------------------------------------------------------------- */

/* Disk owner's built templates take: their own layers as written, and a
 * running build's whole room. */
uint64_t build_owner_bytes(const char *owner)
{
        uint64_t total = 0;
        char name[JP_UUID_SIZE + 8];
        struct stat st;

        for (struct build_tpl *t = templates; t; t = t->next) {
                if (strcmp(t->owner, owner) != 0)
                        continue;
                for (struct build *b = t->builds; b; b = b->next) {
                        snprintf(name, sizeof(name), "%s.img", b->id);
                        if (b->status == BUILD_BUILDING)
                                total += (uint64_t)config->template_build_disk_mb << 20;
                        else if (b->status == BUILD_READY &&
                                 fstatat(layers_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
                                total += (uint64_t)st.st_blocks * 512;
                }
        }
        return total;
}

size_t build_owner_templates(const char *owner)
{
        size_t n = 0;

        for (struct build_tpl *t = templates; t; t = t->next)
                n += strcmp(t->owner, owner) == 0;
        return n;
}

/* ---- sandboxes of built templates ---------------------------------------------- */

const struct build *builds_find(const char *name)
{
        char alias[BUILD_ALIAS_MAX], tag[BUILD_ALIAS_MAX], err[64];
        struct build_tpl *t;

        if (!enabled || !name)
                return NULL;
        t = build_tpl_by_id(name);
        if (t)
                return build_by_tag(t, "");
        if (build_parse_name(name, alias, tag, err, sizeof(err)) < 0)
                return NULL;
        t = build_tpl_by_alias(alias);
        return t ? build_by_tag(t, tag) : NULL;
}

const struct jp_kernelspec *builds_kernel(const struct build *b)
{
        if (b->base[0])
                return templates_kernel(templates_find(b->base), NULL);
        return jp_kernelspec_find(kernels_specs(), config->default_kernel);
}

int builds_sandbox_new(const struct build *b, const struct hostmsg_limits *limits,
                       const struct hostmsg_network *network, char *const *volumes,
                       struct sandbox **out)
{
        const struct jp_kernelspec *spec = builds_kernel(b);
        char *ids[HOSTMSG_MAX_LAYERS + 1] = {NULL};
        struct sandbox_layers layers = {.ids = ids, .volumes = volumes};
        size_t i;
        json_t *v;

        if (!spec)
                return -ENOENT;
        json_array_foreach(b->layers, i, v) {
                if (i < HOSTMSG_MAX_LAYERS)
                        ids[i] = (char *)json_string_value(v);
        }
        return templates_sandbox_new_layered(spec, limits, true, network, &layers, out);
}

json_t *builds_env(const struct build *b)
{
        return b->env;
}

const char *builds_workdir(const struct build *b)
{
        return b->workdir;
}

const char *builds_start_cmd(const struct build *b, bool *as_root)
{
        *as_root = b->root;
        return b->start_cmd;
}
