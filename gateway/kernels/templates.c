#include "autoconf.h"

#include "gateway/kernels/templates.h"
#include "gateway/kernels/specs.h"
#include "protocol/log.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_TEMPLATES 64
#define HOST_PREFIX   "host:"

struct sandbox_template {
        char name[JP_KERNELSPEC_NAME_SIZE];
        char root[PATH_MAX]; /* its tree; "" for the host's /usr */
        char **ro_paths;     /* bound read-only into each of its sandboxes */
        size_t nro;
};

static struct sandbox_template *templates;
static size_t ntemplates;
static const struct jp_kernelspec_list *all; /* every kernelspec, the templates' too */
static char names[MAX_TEMPLATES * (JP_KERNELSPEC_NAME_SIZE + 2)];

static int strv_add(char ***v, size_t *n, const char *s)
{
        char **grown;

        for (size_t i = 0; i < *n; i++) {
                if (strcmp((*v)[i], s) == 0)
                        return 0;
        }
        grown = realloc(*v, (*n + 2) * sizeof(char *));
        if (!grown)
                return -ENOMEM;
        *v = grown;
        grown[*n] = strdup(s);
        grown[*n + 1] = NULL;
        if (!grown[*n])
                return -ENOMEM;
        (*n)++;
        return 0;
}

/* A path the kernel-host may bind or give overlayfs: absolute, plain,
 * without a character overlayfs's options would read as a separator. */
static bool path_usable(const char *path)
{
        return path[0] == '/' && !strstr(path, "/..") && !strpbrk(path, ",:\\\n") &&
               strlen(path) < PATH_MAX - 64;
}

static bool is_dir(const char *path)
{
        struct stat st;

        return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* NAME=host:DIR[:DIR...]: each DIR an existing directory. */
static int parse_host_form(struct sandbox_template *t, const char *dirs)
{
        char dir[PATH_MAX];

        for (const char *p = dirs; *p;) {
                size_t n = strcspn(p, ":");

                if (n == 0 || n >= sizeof(dir)) {
                        log_error("--template %s: an empty or too long directory", t->name);
                        return -EINVAL;
                }
                memcpy(dir, p, n);
                dir[n] = '\0';
                if (!path_usable(dir) || !is_dir(dir)) {
                        log_error("--template %s: '%s' is not an absolute path of a directory",
                                  t->name, dir);
                        return -EINVAL;
                }
                if (strv_add(&t->ro_paths, &t->nro, dir) < 0)
                        return -ENOMEM;
                p += n + (p[n] == ':');
        }
        return 0;
}

/* NAME=DIR: a root filesystem tree, which must have a /usr. */
static int parse_tree(struct sandbox_template *t, const char *dir)
{
        char real[PATH_MAX], usr[PATH_MAX + 8];

        if (dir[0] != '/' || !realpath(dir, real) || !is_dir(real)) {
                log_error("--template %s: '%s' is not an absolute path of a directory", t->name,
                          dir);
                return -EINVAL;
        }
        snprintf(usr, sizeof(usr), "%s/usr", real);
        if (!is_dir(usr)) {
                log_error("--template %s: %s has no usr directory: not a root filesystem "
                          "(see docs/templates-and-languages.md)",
                          t->name, real);
                return -EINVAL;
        }
        if (strcmp(real, "/") == 0 || !path_usable(real)) {
                log_error("--template %s: %s cannot be a template's tree (the host's root, or "
                          "a ',', ':' or '\\' in its path)",
                          t->name, real);
                return -EINVAL;
        }
        snprintf(t->root, sizeof(t->root), "%s", real);
        return 0;
}

static int parse_entry(const char *entry, struct sandbox_template *t)
{
        const char *eq = strchr(entry, '=');
        size_t n = eq ? (size_t)(eq - entry) : 0;

        memset(t, 0, sizeof(*t));
        if (!eq || n == 0 || n >= sizeof(t->name)) {
                log_error("--template '%s': give NAME=DIR or NAME=host:DIR[:DIR...]", entry);
                return -EINVAL;
        }
        memcpy(t->name, entry, n);
        t->name[n] = '\0';
        if (!jp_kernelspec_name_valid(t->name)) {
                log_error("--template %s: a name is 1-63 of A-Z a-z 0-9 . _ -", t->name);
                return -EINVAL;
        }
        if (templates_find(t->name)) {
                log_error("--template %s: given twice", t->name);
                return -EINVAL;
        }
        if (strncmp(eq + 1, HOST_PREFIX, strlen(HOST_PREFIX)) == 0)
                return parse_host_form(t, eq + 1 + strlen(HOST_PREFIX));
        return parse_tree(t, eq + 1);
}

/* A bare program name of a tree's kernelspec, looked up in the tree (as
 * the kernel-host would look it up on the host): its path inside. */
static void resolve_in_tree(const struct sandbox_template *t, json_t *spec)
{
        static const char *const dirs[] = {"/usr/local/bin", "/usr/bin", "/bin"};
        json_t *argv = json_object_get(spec, "argv");
        const char *name = json_string_value(json_array_get(argv, 0));
        char path[PATH_MAX * 2], inside[PATH_MAX];

        if (!name || strchr(name, '/'))
                return;
        for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
                snprintf(path, sizeof(path), "%s%s/%s", t->root, dirs[i], name);
                if (access(path, X_OK) == 0) {
                        snprintf(inside, sizeof(inside), "%s/%s", dirs[i], name);
                        json_array_set_new(argv, 0, json_string(inside));
                        return;
                }
        }
}

/* Sets metadata.glovebox.template in spec. 0 or -ENOMEM. */
static int mark_template(json_t *spec, const char *name)
{
        json_t *metadata = json_object_get(spec, "metadata");
        json_t *glovebox = json_object_get(metadata, "glovebox");

        if (!json_is_object(glovebox)) {
                glovebox = json_object();
                if (json_object_set_new(metadata, "glovebox", glovebox) < 0)
                        return -ENOMEM;
        }
        return json_object_set_new(glovebox, "template", json_string(name)) < 0 ? -ENOMEM : 0;
}

static int by_name(const void *a, const void *b)
{
        return strcmp(((const struct jp_kernelspec *)a)->name,
                      ((const struct jp_kernelspec *)b)->name);
}

/* Adds kernel (one of t's) to specs as name, marked as t's. */
static int add_kernel(struct sandbox_template *t, struct jp_kernelspec_list *specs,
                      const struct jp_kernelspec *kernel, const char *name, size_t root_len)
{
        const struct jp_kernelspec *taken = jp_kernelspec_find(specs, name);
        struct jp_kernelspec *added;

        if (taken && strcmp(taken->template_name, t->name) == 0)
                return 0; /* the operator's own kernelspec for it */
        if (taken) {
                log_error("template %s: kernelspec %s (%s) has its kernel's name; give it "
                          "\"metadata\": {\"glovebox\": {\"template\": \"%s\"}} or rename one",
                          t->name, name, taken->dir, t->name);
                return -EINVAL;
        }
        if (jp_kernelspec_list_append(specs, kernel, name) < 0)
                return -ENOMEM;
        added = &specs->items[specs->count - 1];
        snprintf(added->template_name, sizeof(added->template_name), "%s", t->name);
        added->root_len = root_len;
        if (root_len)
                resolve_in_tree(t, added->spec);
        /* Clients see where it runs, as in a kernelspec that names it. */
        if (mark_template(added->spec, t->name) < 0)
                return -ENOMEM;
        log_info("kernelspec %s: %s in template %s", added->name, kernel->name, t->name);
        return 0;
}

/* t's kernels: its tree's kernelspecs, or the host's that name no template. */
static int add_kernels(struct sandbox_template *t, const struct config *cfg,
                       struct jp_kernelspec_list *specs, size_t nhost)
{
        struct jp_kernelspec_list found = {NULL, 0, 0};
        char local[PATH_MAX + 64], usr[PATH_MAX + 64], name[JP_KERNELSPEC_NAME_SIZE * 2 + 2];
        char *path[] = {local, usr, NULL};
        const struct jp_kernelspec *dflt;
        int rc = 0;

        if (t->root[0]) {
                snprintf(local, sizeof(local), "%s/usr/local/share/jupyter/kernels", t->root);
                snprintf(usr, sizeof(usr), "%s/usr/share/jupyter/kernels", t->root);
                rc = jp_kernelspec_discover(path, &found);
        } else {
                for (size_t i = 0; rc == 0 && i < nhost; i++) {
                        if (!specs->items[i].template_name[0])
                                rc = jp_kernelspec_list_append(&found, &specs->items[i],
                                                               specs->items[i].name);
                }
        }
        if (rc < 0)
                goto out;
        if (found.count == 0) {
                log_warn("template %s has no kernelspec (in usr/share/jupyter/kernels or "
                         "usr/local/share/jupyter/kernels of its tree)",
                         t->name);
                goto out;
        }
        qsort(found.items, found.count, sizeof(found.items[0]), by_name);
        dflt = jp_kernelspec_find(&found, cfg->default_kernel);
        if (!dflt)
                dflt = &found.items[0];
        rc = add_kernel(t, specs, dflt, t->name, t->root[0] ? strlen(t->root) : 0);
        for (size_t i = 0; rc == 0 && i < found.count; i++) {
                if (&found.items[i] == dflt)
                        continue;
                snprintf(name, sizeof(name), "%s-%s", t->name, found.items[i].name);
                if (!jp_kernelspec_name_valid(name)) {
                        log_warn("template %s: kernel %s left out: its name %s is too long",
                                 t->name, found.items[i].name, name);
                        continue;
                }
                rc = add_kernel(t, specs, &found.items[i], name, t->root[0] ? strlen(t->root) : 0);
        }
out:
        jp_kernelspec_list_free(&found);
        return rc;
}

static int make_names(void)
{
        size_t n = 0;

        names[0] = '\0';
        for (size_t i = 0; i < ntemplates; i++)
                n += (size_t)snprintf(names + n, sizeof(names) - n, "%s%s", i ? ", " : "",
                                      templates[i].name);
        return 0;
}

int templates_init(const struct config *cfg, struct jp_kernelspec_list *specs)
{
        size_t nhost = specs->count, count = 0;
        int rc = 0;

        all = specs;
        while (cfg->templates && cfg->templates[count])
                count++;
        if (count > MAX_TEMPLATES) {
                log_error("at most %d templates", MAX_TEMPLATES);
                return -EINVAL;
        }
        if (count && strcmp(cfg->sandbox, "none") == 0) {
                log_error("--template needs the sandbox (not --sandbox=none)");
                return -EINVAL;
        }
        templates = calloc(count + 1, sizeof(*templates));
        if (!templates)
                return -ENOMEM;
        for (size_t i = 0; rc == 0 && i < count; i++) {
                rc = parse_entry(cfg->templates[i], &templates[i]);
                if (rc == 0)
                        ntemplates++;
        }
        /* Kernelspecs that name a template: it must exist, and a bare
         * program name is the tree's. */
        for (size_t i = 0; rc == 0 && i < nhost; i++) {
                const char *name = specs->items[i].template_name;
                const struct sandbox_template *t = templates_find(name);

                if (t && t->root[0])
                        resolve_in_tree(t, specs->items[i].spec);
                if (name[0] && !t) {
                        log_error("kernelspec %s (%s) names template %s, which is not given "
                                  "(--template %s=DIR)",
                                  specs->items[i].name, specs->items[i].dir, name, name);
                        rc = -EINVAL;
                }
        }
        for (size_t i = 0; rc == 0 && i < ntemplates; i++) {
                rc = add_kernels(&templates[i], cfg, specs, nhost);
                if (rc == 0)
                        log_info("template %s: %s%s", templates[i].name,
                                 templates[i].root[0] ? templates[i].root : "the host's /usr",
                                 templates[i].root[0] ? "" : " and more directories");
        }
        /* What each sandbox binds: kernelspec directories a sandbox would
         * not see otherwise. */
        for (size_t i = 0; rc == 0 && i < specs->count; i++) {
                const struct jp_kernelspec *ks = &specs->items[i];
                struct sandbox_template *t =
                    (struct sandbox_template *)templates_find(ks->template_name);

                if (ks->root_len)
                        continue; /* in a tree: there already */
                /* (The host's are specs_ro_paths, kept current.) */
                if (t && t->root[0])
                        rc = strv_add(&t->ro_paths, &t->nro, ks->dir);
        }
        if (rc == 0)
                rc = make_names();
        if (rc == -ENOMEM)
                log_error("out of memory reading the templates");
        return rc;
}

void templates_free(void)
{
        for (size_t i = 0; i < ntemplates; i++)
                jp_strv_free(templates[i].ro_paths);
        free(templates);
        templates = NULL;
        ntemplates = 0;
}

const struct sandbox_template *templates_find(const char *name)
{
        for (size_t i = 0; name && name[0] && i < ntemplates; i++) {
                if (strcmp(templates[i].name, name) == 0)
                        return &templates[i];
        }
        return NULL;
}

const struct jp_kernelspec *templates_kernel(const struct sandbox_template *t, const char *kernel)
{
        const struct jp_kernelspec_list *specs = all;
        char name[JP_KERNELSPEC_NAME_SIZE * 2 + 2];
        const struct jp_kernelspec *ks;

        if (!kernel || !kernel[0] || strcmp(kernel, t->name) == 0) {
                /* Its default kernel has its name; a template without
                 * kernels of its own has those that name it. */
                ks = jp_kernelspec_find(specs, t->name);
                if (ks && strcmp(ks->template_name, t->name) != 0)
                        ks = NULL;
                for (size_t i = 0; !ks && i < specs->count; i++) {
                        if (strcmp(specs->items[i].template_name, t->name) == 0)
                                ks = &specs->items[i];
                }
        } else {
                snprintf(name, sizeof(name), "%s-%s", t->name, kernel);
                ks = jp_kernelspec_find(specs, name);
                /* Or a kernelspec of the gateway's that names t. */
                if (!ks)
                        ks = jp_kernelspec_find(specs, kernel);
                /* Or the kernel's own name, when it is the default one. */
                if (!ks || strcmp(ks->template_name, t->name) != 0) {
                        ks = jp_kernelspec_find(specs, t->name);
                        if (ks && strcmp(strrchr(ks->dir, '/') + 1, kernel) != 0)
                                ks = NULL;
                }
        }
        return ks && strcmp(ks->template_name, t->name) == 0 ? ks : NULL;
}

const char *templates_names(void)
{
        return names;
}

int templates_sandbox_new(const struct jp_kernelspec *spec, const struct hostmsg_limits *limits,
                          bool confined, const struct hostmsg_network *network,
                          struct sandbox **out)
{
        return templates_sandbox_new_layered(spec, limits, confined, network, NULL, out);
}

int templates_sandbox_new_layered(const struct jp_kernelspec *spec,
                                  const struct hostmsg_limits *limits, bool confined,
                                  const struct hostmsg_network *network,
                                  const struct sandbox_layers *layers, struct sandbox **out)
{
        const struct sandbox_template *t = templates_find(spec->template_name);
        char *const *host = specs_ro_paths();
        char **paths = NULL;
        size_t n = 0;
        int rc = 0;

        if (t && t->root[0])
                return sandbox_new_layered(limits, t->ro_paths, t->root, confined, network, layers,
                                           out);
        /* On the host's /usr: what the kernelspecs need, and a host-form
         * template's own directories. */
        for (size_t i = 0; rc == 0 && host && host[i]; i++)
                rc = strv_add(&paths, &n, host[i]);
        for (size_t i = 0; rc == 0 && t && i < t->nro; i++)
                rc = strv_add(&paths, &n, t->ro_paths[i]);
        if (rc == 0)
                rc = sandbox_new_layered(limits, paths, NULL, confined, network, layers, out);
        jp_strv_free(paths);
        return rc;
}

bool templates_same(const struct jp_kernelspec *a, const struct jp_kernelspec *b)
{
        return strcmp(a->template_name, b->template_name) == 0;
}
